#!/usr/bin/env bash
printf '%s\n' '5 7 9 11 13' > answer.txt
