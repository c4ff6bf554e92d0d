NAME = "audit-log"
PRIORITY = 10
