#!/usr/bin/env bash
printf '%s\n' '3 3 s' > answer.txt
