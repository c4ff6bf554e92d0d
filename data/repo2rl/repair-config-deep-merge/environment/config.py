import json

DEFAULTS = {"db": {"host": "localhost", "port": 5432, "options": {"ssl": False}}, "debug": False}


def merge(base, override):
    """base with override's values on top; neither argument is modified."""
    return {**base, **override}


def load(path):
    with open(path) as f:
        return merge(DEFAULTS, json.load(f))
