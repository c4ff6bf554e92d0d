RATES = {"standard": 4.99, "express": 9.99}
