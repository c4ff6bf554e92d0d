#!/usr/bin/env bash
# Grade answer.txt against expected.json with the shared ladder: exact -> numeric with tolerance -> list.
python3 -S "$TESTS_DIR/grade.py" "$TESTS_DIR/expected.json" answer.txt "$LOGS_DIR"
