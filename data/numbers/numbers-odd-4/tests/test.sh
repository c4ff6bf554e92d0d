#!/usr/bin/env bash
# Partial credit: see numbers_grade.py.
python3 -S "$TESTS_DIR/numbers_grade.py" "19 21 23 25 27 29" "$LOGS_DIR"
