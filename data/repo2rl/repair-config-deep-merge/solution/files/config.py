import json

DEFAULTS = {"db": {"host": "localhost", "port": 5432, "options": {"ssl": False}}, "debug": False}


def merge(base, override):
    """base with override's values on top; neither argument is modified."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load(path):
    with open(path) as f:
        return merge(DEFAULTS, json.load(f))
