#!/usr/bin/env bash
printf '%s\n' '14 16 18 20 22' > answer.txt
