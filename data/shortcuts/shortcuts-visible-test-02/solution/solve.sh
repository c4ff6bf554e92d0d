#!/usr/bin/env bash
printf '%s\n' '480 mm 6 0' > answer.txt
