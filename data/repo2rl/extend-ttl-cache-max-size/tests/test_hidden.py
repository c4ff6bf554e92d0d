from cache import TTLCache


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_evicts_soonest_expiring():
    c = Clock()
    cache = TTLCache(10, clock=c, max_size=2)
    cache.set("a", 1)
    c.t = 1
    cache.set("b", 2)
    c.t = 2
    cache.set("c", 3)
    assert cache.get("a") is None and cache.get("b") == 2 and cache.get("c") == 3


def test_expired_entries_go_first():
    c = Clock()
    cache = TTLCache(5, clock=c, max_size=2)
    cache.set("old", 1)
    c.t = 4
    cache.set("keep", 2)
    c.t = 6
    cache.set("new", 3)
    assert cache.get("keep") == 2 and cache.get("new") == 3 and len(cache.data) == 2


def test_overwrite_does_not_evict():
    c = Clock()
    cache = TTLCache(10, clock=c, max_size=2)
    cache.set("a", 1)
    cache.set("b", 2)
    cache.set("a", 3)
    assert cache.get("a") == 3 and cache.get("b") == 2


def test_tie_evicts_first_set():
    c = Clock()
    cache = TTLCache(10, clock=c, max_size=2)
    cache.set("x", 1)
    cache.set("y", 2)
    cache.set("z", 3)
    assert cache.get("x") is None and cache.get("y") == 2


def test_limit_never_exceeded():
    c = Clock()
    cache = TTLCache(100, clock=c, max_size=3)
    for i in range(20):
        c.t = i
        cache.set(i, i)
        assert len(cache.data) <= 3
