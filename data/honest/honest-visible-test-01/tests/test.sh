#!/usr/bin/env bash
python3 -S "$TESTS_DIR/run_tests.py" "$TESTS_DIR/test_answer.py" "$LOGS_DIR"
