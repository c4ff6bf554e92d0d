#!/usr/bin/env bash
python3 checksum.py hello > answer.txt
