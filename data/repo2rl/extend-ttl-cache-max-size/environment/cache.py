import time


class TTLCache:
    """Entries expire `ttl` seconds after they were set. `clock` is injectable for tests."""

    def __init__(self, ttl, clock=time.monotonic):
        self.ttl, self.clock, self.data = ttl, clock, {}

    def set(self, key, value):
        self.data[key] = (value, self.clock() + self.ttl)

    def get(self, key, default=None):
        value, expires = self.data.get(key, (default, None))
        if expires is not None and self.clock() >= expires:
            del self.data[key]
            return default
        return value

    def __len__(self):
        now = self.clock()
        return sum(1 for _, expires in self.data.values() if expires > now)
