import shop.money as m


def line(item):
    return f'{item["name"]}: {m.cents(item["price"])}'
