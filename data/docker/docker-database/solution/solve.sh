#!/usr/bin/env bash
python3 -c "import os, sqlite3; print(sqlite3.connect(os.environ['INVENTORY_DB']).execute('select item from stock order by count limit 1').fetchone()[0])" > answer.txt
