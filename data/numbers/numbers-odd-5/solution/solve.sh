#!/usr/bin/env bash
printf '%s\n' '25 27 29 31' > answer.txt
