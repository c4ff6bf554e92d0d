#!/usr/bin/env bash
python3 -S "$TESTS_DIR/toy_grade.py" exact "$LOGS_DIR" "930 fkt 17 66"
