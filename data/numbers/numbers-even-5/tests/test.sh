#!/usr/bin/env bash
# Partial credit: see numbers_grade.py.
python3 -S "$TESTS_DIR/numbers_grade.py" "24 26 28 30" "$LOGS_DIR"
