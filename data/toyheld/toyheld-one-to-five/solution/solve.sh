#!/usr/bin/env bash
printf '%s\n' '1 2 3 4 5' > answer.txt
