#!/usr/bin/env bash
# Partial credit: see toy_grade.py (even_digits).
python3 -S "$TESTS_DIR/toy_grade.py" even_digits "$LOGS_DIR"
