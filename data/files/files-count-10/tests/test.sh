#!/usr/bin/env bash
# Partial credit: see files_grade.py.
python3 -S "$TESTS_DIR/files_grade.py" "4" "$LOGS_DIR"
