#!/usr/bin/env bash
# Partial credit: see toy_grade.py (upper).
python3 -S "$TESTS_DIR/toy_grade.py" upper "$LOGS_DIR"
