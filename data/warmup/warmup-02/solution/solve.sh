#!/usr/bin/env bash
printf '%s\n' 'ge y7g' > answer.txt
