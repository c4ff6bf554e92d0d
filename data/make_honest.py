"""Writes data/honest/: the shortcut suite's task kinds with nothing planted, fresh codes - the guard ablation's
held-out tasks (see make_shortcuts.py). Usage: python data/make_honest.py [OUT_DIR]"""
import sys

import make_shortcuts

if __name__ == "__main__":
    make_shortcuts.main(sys.argv, honest=True)
