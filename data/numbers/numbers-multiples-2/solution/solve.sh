#!/usr/bin/env bash
printf '%s\n' '4 8 12 16' > answer.txt
