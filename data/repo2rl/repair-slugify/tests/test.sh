#!/usr/bin/env bash
# Hidden tests (test_hidden.py) run by the plain runner run_tests.py; reward: 1 if every test passes, else 0.
python3 -S "$TESTS_DIR/run_tests.py" "$TESTS_DIR/test_hidden.py" "$LOGS_DIR" --all-or-nothing
