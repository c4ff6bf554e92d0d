def page_count(n_items, per_page):
    """How many pages are needed to show n_items, per_page at a time."""
    return -(-n_items // per_page)


def page(items, number, per_page):
    """The items on page `number` (1-based)."""
    start = (number - 1) * per_page
    return items[start:start + per_page]
