#!/usr/bin/env bash
printf '%s\n' '15 17 19 21 23' > answer.txt
