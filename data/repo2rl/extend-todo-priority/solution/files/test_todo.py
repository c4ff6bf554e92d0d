from todo import TodoList


def test_pending_excludes_done():
    t = TodoList()
    t.add("write")
    t.done(t.add("read"))
    assert t.pending() == ["write"]


def test_by_priority_high_first():
    t = TodoList()
    t.add("later", "low")
    t.add("now", "high")
    assert t.by_priority() == ["now", "later"]


if __name__ == "__main__":
    test_pending_excludes_done()
    test_by_priority_high_first()
    print("ok")
