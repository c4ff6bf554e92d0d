def cents(amount):
    return round(amount * 100)
