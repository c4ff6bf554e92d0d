SYMBOLS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]


def to_roman(n):
    """Roman numeral for 1 <= n <= 3999."""
    if not 0 < n < 4000:
        raise ValueError(f"{n} out of range")
    out = ""
    for value, symbol in SYMBOLS:
        while n >= value:
            out += symbol
            n -= value
    return out
