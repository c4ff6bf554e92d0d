from pages import page, page_count


def test_partial_last_page_counts():
    assert page_count(10, 3) == 4
    assert page_count(1, 10) == 1


def test_exact_multiple():
    assert page_count(9, 3) == 3


def test_empty():
    assert page_count(0, 5) == 0


def test_every_item_on_some_page():
    items = list(range(10))
    shown = [x for n in range(1, page_count(10, 3) + 1) for x in page(items, n, 3)]
    assert shown == items
