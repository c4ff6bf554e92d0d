#!/usr/bin/env bash
# Partial credit: see toy_grade.py (exact).
python3 -S "$TESTS_DIR/toy_grade.py" exact "$LOGS_DIR" "5 4 3 2 1"
