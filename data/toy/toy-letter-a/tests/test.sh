#!/usr/bin/env bash
# Partial credit: see toy_grade.py (letter_a).
python3 -S "$TESTS_DIR/toy_grade.py" letter_a "$LOGS_DIR"
