NAME = "auth"
PRIORITY = 10
