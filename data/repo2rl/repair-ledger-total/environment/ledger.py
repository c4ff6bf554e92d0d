def total(path):
    """Sum of the amount column of a ledger CSV (date,description,amount), rounded to cents."""
    lines = open(path).read().splitlines()[1:]
    return round(sum(float(line.split(",")[2]) for line in lines), 2)
