#!/usr/bin/env bash
printf '%s\n' '519' > answer.txt
