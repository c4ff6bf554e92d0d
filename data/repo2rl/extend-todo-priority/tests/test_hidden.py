from todo import TodoList


def test_default_priority_is_normal():
    t = TodoList()
    t.add("x")
    assert t.items[0]["priority"] == "normal"


def test_priority_stored():
    t = TodoList()
    t.add("x", priority="high")
    assert t.items[0]["priority"] == "high"


def test_invalid_priority():
    t = TodoList()
    assert raises(ValueError, t.add, "x", priority="urgent")


def test_by_priority_order():
    t = TodoList()
    t.add("l1", "low")
    t.add("n1")
    t.add("h1", "high")
    t.add("n2", "normal")
    assert t.by_priority() == ["h1", "n1", "n2", "l1"]


def test_by_priority_skips_done():
    t = TodoList()
    t.done(t.add("h", "high"))
    t.add("l", "low")
    assert t.by_priority() == ["l"]


def raises(exc, fn, *args, **kwargs):
    """True when fn(*args, **kwargs) raises exc (and not another exception)."""
    try:
        fn(*args, **kwargs)
    except exc:
        return True
    except Exception:
        return False
    return False
