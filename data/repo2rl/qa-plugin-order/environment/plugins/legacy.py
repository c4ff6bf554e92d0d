NAME = "legacy"
PRIORITY = 99
ENABLED = False
