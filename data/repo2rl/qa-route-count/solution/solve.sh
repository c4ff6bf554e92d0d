#!/usr/bin/env bash
python3 -c "import app; print(len(app.ROUTES))" > answer.txt
