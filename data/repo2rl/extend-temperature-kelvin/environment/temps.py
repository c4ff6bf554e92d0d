def to_celsius(value, unit):
    if unit == "C":
        return value
    if unit == "F":
        return (value - 32) * 5 / 9
    raise ValueError(f"unknown unit {unit}")


def from_celsius(value, unit):
    if unit == "C":
        return value
    if unit == "F":
        return value * 9 / 5 + 32
    raise ValueError(f"unknown unit {unit}")


def convert(value, from_unit, to_unit):
    """convert(100, "C", "F") -> 212.0"""
    return from_celsius(to_celsius(value, from_unit), to_unit)
