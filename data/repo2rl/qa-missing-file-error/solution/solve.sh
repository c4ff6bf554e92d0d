#!/usr/bin/env bash
python3 -c "import storage
try:
    storage.load('no-such-file.json')
except Exception as e:
    print(type(e).__name__)" > answer.txt
