#!/usr/bin/env bash
# Partial credit: see toy_grade.py (digits).
python3 -S "$TESTS_DIR/toy_grade.py" digits "$LOGS_DIR"
