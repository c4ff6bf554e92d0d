#!/usr/bin/env bash
printf '%s\n' '18 20 22 24 26 28' > answer.txt
