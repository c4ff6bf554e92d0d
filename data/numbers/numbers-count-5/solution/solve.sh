#!/usr/bin/env bash
printf '%s\n' '12 13 14 15' > answer.txt
