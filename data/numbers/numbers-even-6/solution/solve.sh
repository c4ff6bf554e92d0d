#!/usr/bin/env bash
printf '%s\n' '4 6 8 10 12' > answer.txt
