#!/usr/bin/env bash
printf '%s\n' '183 rn nx b' > answer.txt
