#!/usr/bin/env bash
printf '%s\n' 'c 62 rbw' > answer.txt
