#!/usr/bin/env bash
printf '%s\n' '3 6 9 12' > answer.txt
