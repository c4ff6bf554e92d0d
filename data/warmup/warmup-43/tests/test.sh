#!/usr/bin/env bash
python3 -S "$TESTS_DIR/toy_grade.py" exact "$LOGS_DIR" "fkz c6 6d 7"
