#!/usr/bin/env bash
printf '%s\n' '19 21 23 25 27 29' > answer.txt
