NAME = "template"
PRIORITY = 100
