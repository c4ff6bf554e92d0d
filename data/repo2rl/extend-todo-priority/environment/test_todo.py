from todo import TodoList


def test_pending_excludes_done():
    t = TodoList()
    t.add("write")
    t.done(t.add("read"))
    assert t.pending() == ["write"]


if __name__ == "__main__":
    test_pending_excludes_done()
    print("ok")
