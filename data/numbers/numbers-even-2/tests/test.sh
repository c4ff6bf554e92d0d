#!/usr/bin/env bash
# Partial credit: see numbers_grade.py.
python3 -S "$TESTS_DIR/numbers_grade.py" "14 16 18 20 22" "$LOGS_DIR"
