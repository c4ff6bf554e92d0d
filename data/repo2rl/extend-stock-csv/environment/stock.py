class Stock:
    def __init__(self):
        self.qty = {}

    def set(self, sku, qty):
        if qty < 0:
            raise ValueError("negative quantity")
        self.qty[sku] = qty

    def get(self, sku):
        return self.qty.get(sku, 0)
