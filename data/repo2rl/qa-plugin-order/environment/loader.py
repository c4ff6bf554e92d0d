import importlib
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def load_all():
    mods = []
    for fn in os.listdir(os.path.join(HERE, "plugins")):
        if fn.endswith(".py") and not fn.startswith("_"):
            mods.append(importlib.import_module("plugins." + fn[:-3]))
    mods = [m for m in mods if getattr(m, "ENABLED", True)]
    return sorted(mods, key=lambda m: (-m.PRIORITY, m.NAME))
