from shop import money


def refund_cents(amount):
    return -money.cents(amount)
