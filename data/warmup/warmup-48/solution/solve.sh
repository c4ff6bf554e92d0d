#!/usr/bin/env bash
printf '%s\n' 'cd 055 h' > answer.txt
