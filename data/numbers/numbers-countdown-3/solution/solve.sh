#!/usr/bin/env bash
printf '%s\n' '12 11 10 9' > answer.txt
