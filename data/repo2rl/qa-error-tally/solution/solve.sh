#!/usr/bin/env bash
python3 tally.py events.log --level ERROR > answer.txt
