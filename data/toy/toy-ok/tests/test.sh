#!/usr/bin/env bash
# Partial credit: see toy_grade.py (say_ok).
python3 -S "$TESTS_DIR/toy_grade.py" say_ok "$LOGS_DIR"
