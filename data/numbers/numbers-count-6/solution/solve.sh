#!/usr/bin/env bash
printf '%s\n' '2 3 4 5 6' > answer.txt
