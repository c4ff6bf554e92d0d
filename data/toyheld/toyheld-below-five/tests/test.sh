#!/usr/bin/env bash
# Partial credit: see toy_grade.py (small_digits).
python3 -S "$TESTS_DIR/toy_grade.py" small_digits "$LOGS_DIR"
