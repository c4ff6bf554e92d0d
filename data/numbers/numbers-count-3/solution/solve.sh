#!/usr/bin/env bash
printf '%s\n' '9 10 11 12' > answer.txt
