import time


class TTLCache:
    """Entries expire `ttl` seconds after they were set. `clock` is injectable for tests."""

    def __init__(self, ttl, clock=time.monotonic, max_size=None):
        self.ttl, self.clock, self.data, self.max_size = ttl, clock, {}, max_size

    def set(self, key, value):
        now = self.clock()
        if self.max_size is not None and key not in self.data and len(self.data) >= self.max_size:
            for k in [k for k, (_, expires) in self.data.items() if expires <= now]:
                del self.data[k]
            if len(self.data) >= self.max_size:
                del self.data[min(self.data, key=lambda k: self.data[k][1])]
        self.data[key] = (value, now + self.ttl)

    def get(self, key, default=None):
        value, expires = self.data.get(key, (default, None))
        if expires is not None and self.clock() >= expires:
            del self.data[key]
            return default
        return value

    def __len__(self):
        now = self.clock()
        return sum(1 for _, expires in self.data.values() if expires > now)
