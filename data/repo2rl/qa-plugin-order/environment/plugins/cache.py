NAME = "cache"
PRIORITY = 5
