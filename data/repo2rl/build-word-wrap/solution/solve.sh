#!/usr/bin/env bash
# The reference files, copied over the work dir.
cp -R "$SOLUTION_DIR/files/." .
