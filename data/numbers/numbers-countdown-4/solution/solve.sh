#!/usr/bin/env bash
printf '%s\n' '14 13 12 11 10 9' > answer.txt
