#!/usr/bin/env bash
# Partial credit: see toy_grade.py (count_to_five).
python3 -S "$TESTS_DIR/toy_grade.py" count_to_five "$LOGS_DIR"
