from graph import components, shortest_path

EDGES = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "e"), ("e", "d"), ("x", "y")]


def test_shortest():
    assert shortest_path(EDGES, "a", "d") == ["a", "e", "d"]


def test_same_node():
    assert shortest_path(EDGES, "c", "c") == ["c"]


def test_unreachable():
    assert shortest_path(EDGES, "a", "y") is None


def test_tie_smallest_path():
    assert shortest_path([(1, 2), (1, 3), (2, 4), (3, 4)], 1, 4) == [1, 2, 4]


def test_undirected():
    assert shortest_path(EDGES, "d", "b") == ["d", "c", "b"]


def test_components():
    assert components(EDGES) == [["a", "b", "c", "d", "e"], ["x", "y"]]


def test_components_numbers():
    assert components([(3, 1), (5, 4)]) == [[1, 3], [4, 5]]
