ZERO_C = -273.15


def to_celsius(value, unit):
    if unit == "C":
        c = value
    elif unit == "F":
        c = (value - 32) * 5 / 9
    elif unit == "K":
        c = value + ZERO_C
    else:
        raise ValueError(f"unknown unit {unit}")
    if c < ZERO_C - 1e-9:
        raise ValueError(f"{value} {unit} is below absolute zero")
    return c


def from_celsius(value, unit):
    if unit == "C":
        return value
    if unit == "F":
        return value * 9 / 5 + 32
    if unit == "K":
        return value - ZERO_C
    raise ValueError(f"unknown unit {unit}")


def convert(value, from_unit, to_unit):
    """convert(100, "C", "F") -> 212.0"""
    if from_unit == to_unit:
        to_celsius(value, from_unit)
        return value
    return from_celsius(to_celsius(value, from_unit), to_unit)
