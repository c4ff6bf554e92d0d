#!/usr/bin/env bash
printf '%s\n' '6 7 8' > answer.txt
