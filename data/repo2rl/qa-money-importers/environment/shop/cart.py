from shop.money import cents


def total(items):
    return sum(cents(i["price"]) * i["qty"] for i in items)
