#!/usr/bin/env bash
# Hidden tests (test_hidden.py) run by the plain runner run_tests.py; reward: the fraction of tests passed.
python3 -S "$TESTS_DIR/run_tests.py" "$TESTS_DIR/test_hidden.py" "$LOGS_DIR"
