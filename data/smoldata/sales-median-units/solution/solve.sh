#!/usr/bin/env bash
python3 "$SOLUTION_DIR/solve.py"
