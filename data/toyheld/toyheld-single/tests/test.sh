#!/usr/bin/env bash
# Partial credit: see toy_grade.py (one_number).
python3 -S "$TESTS_DIR/toy_grade.py" one_number "$LOGS_DIR"
