#!/usr/bin/env bash
# Partial credit: see numbers_grade.py.
python3 -S "$TESTS_DIR/numbers_grade.py" "25 27 29 31" "$LOGS_DIR"
