#!/usr/bin/env bash
printf '%s\n' '6 5 4 3 2' > answer.txt
