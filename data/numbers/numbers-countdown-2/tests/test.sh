#!/usr/bin/env bash
# Partial credit: see numbers_grade.py.
python3 -S "$TESTS_DIR/numbers_grade.py" "11 10 9 8 7" "$LOGS_DIR"
