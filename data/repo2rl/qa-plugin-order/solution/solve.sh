#!/usr/bin/env bash
python3 -c "import loader; print(', '.join(m.NAME for m in loader.load_all()))" > answer.txt
