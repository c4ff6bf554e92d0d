#!/usr/bin/env bash
python3 -S "$TESTS_DIR/toy_grade.py" exact "$LOGS_DIR" "3 f ja2 3xa"
