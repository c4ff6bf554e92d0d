# prices are stored in money units; see shop.money for conversions
CATALOG = {"pen": 1.5, "pad": 3.0}
