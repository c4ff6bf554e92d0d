#!/usr/bin/env bash
printf '%s\n' '5 4 3 2 1' > answer.txt
