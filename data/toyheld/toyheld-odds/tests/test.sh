#!/usr/bin/env bash
# Partial credit: see toy_grade.py (odd_digits).
python3 -S "$TESTS_DIR/toy_grade.py" odd_digits "$LOGS_DIR"
