#!/usr/bin/env bash
python3 -S "$TESTS_DIR/toy_grade.py" exact "$LOGS_DIR" "n 17 91"
