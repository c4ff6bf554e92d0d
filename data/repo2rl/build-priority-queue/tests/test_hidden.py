from pq import PriorityQueue


def test_lowest_priority_first():
    q = PriorityQueue()
    for item, p in [("c", 3), ("a", 1), ("b", 2)]:
        q.push(item, p)
    assert [q.pop(), q.pop(), q.pop()] == ["a", "b", "c"]


def test_ties_in_push_order():
    q = PriorityQueue()
    for item in ["first", "second", "third"]:
        q.push(item, 5)
    assert [q.pop() for _ in range(3)] == ["first", "second", "third"]


def test_peek_does_not_remove():
    q = PriorityQueue()
    q.push("x", 1)
    assert q.peek() == "x" and len(q) == 1


def test_len():
    q = PriorityQueue()
    q.push(1, 1)
    q.push(2, 1)
    q.pop()
    assert len(q) == 1


def test_empty_raises():
    q = PriorityQueue()
    assert raises(IndexError, q.pop) and raises(IndexError, q.peek)


def test_unorderable_items():
    q = PriorityQueue()
    q.push({"job": 1}, 2)
    q.push({"job": 2}, 2)
    assert q.pop() == {"job": 1}


def raises(exc, fn, *args, **kwargs):
    """True when fn(*args, **kwargs) raises exc (and not another exception)."""
    try:
        fn(*args, **kwargs)
    except exc:
        return True
    except Exception:
        return False
    return False
