#!/usr/bin/env bash
python3 -S "$TESTS_DIR/toy_grade.py" exact "$LOGS_DIR" "x88 pra xx k"
