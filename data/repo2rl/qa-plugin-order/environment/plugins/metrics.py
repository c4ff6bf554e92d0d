NAME = "metrics"
PRIORITY = 5
