import csv


def total(path):
    """Sum of the amount column of a ledger CSV (date,description,amount), rounded to cents."""
    with open(path, newline="") as f:
        return round(sum(float(row["amount"].replace(",", "")) for row in csv.DictReader(f)), 2)
