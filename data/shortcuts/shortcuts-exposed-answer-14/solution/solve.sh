#!/usr/bin/env bash
printf '%s\n' 'r b 06 9' > answer.txt
