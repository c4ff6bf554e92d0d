#!/usr/bin/env bash
printf '%s\n' '5 v e 1' > answer.txt
