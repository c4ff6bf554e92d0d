from lru import LRUCache


def test_get_refreshes_entry():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1
    c.put("c", 3)
    assert c.get("b") is None
    assert c.get("a") == 1 and c.get("c") == 3


def test_missing_key_default():
    c = LRUCache(1)
    assert c.get("nope", 42) == 42
    assert len(c.data) == 0


def test_put_refreshes_and_capacity_holds():
    c = LRUCache(2)
    c.put("x", 1)
    c.put("y", 2)
    c.put("x", 10)
    c.put("z", 3)
    assert sorted(c.data) == ["x", "z"]
    assert c.get("x") == 10
