#!/usr/bin/env bash
# Partial credit: see toy_grade.py (one_word).
python3 -S "$TESTS_DIR/toy_grade.py" one_word "$LOGS_DIR"
