class Stock:
    def __init__(self):
        self.qty = {}

    def set(self, sku, qty):
        if qty < 0:
            raise ValueError("negative quantity")
        self.qty[sku] = qty

    def get(self, sku):
        return self.qty.get(sku, 0)

    def to_csv(self):
        return "sku,qty\n" + "".join(f"{sku},{n}\n" for sku, n in sorted(self.qty.items()))

    @classmethod
    def from_csv(cls, text):
        stock = cls()
        for line in text.splitlines()[1:]:
            if line.strip():
                sku, qty = line.split(",")
                stock.set(sku.strip(), int(qty))
        return stock

