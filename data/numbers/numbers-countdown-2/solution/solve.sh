#!/usr/bin/env bash
printf '%s\n' '11 10 9 8 7' > answer.txt
