class OutOfStock(Exception):
    pass


class Inventory:
    def __init__(self):
        self.stock = {}

    def add(self, sku, qty):
        if qty <= 0:
            raise ValueError("qty must be positive")
        self.stock[sku] = self.stock.get(sku, 0) + qty

    def remove(self, sku, qty):
        if qty <= 0:
            raise ValueError("qty must be positive")
        have = self.stock.get(sku, 0)
        if qty > have:
            raise OutOfStock(f"{sku}: {have} in stock, {qty} requested")
        self.stock[sku] = have - qty

    def count(self, sku):
        return self.stock.get(sku, 0)
