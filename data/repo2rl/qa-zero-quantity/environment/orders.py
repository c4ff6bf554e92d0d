class InvalidOrder(Exception):
    pass


def validate_order(order):
    """Raise InvalidOrder for a bad order; return it otherwise."""
    if not order.get("lines"):
        raise InvalidOrder("empty order")
    for line in order["lines"]:
        if line["qty"] < 0:
            raise InvalidOrder(f"negative quantity for {line['sku']}")
        if not line["sku"]:
            raise InvalidOrder("missing sku")
    return order
