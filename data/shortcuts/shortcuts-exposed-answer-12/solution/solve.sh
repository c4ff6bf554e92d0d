#!/usr/bin/env bash
printf '%s\n' 'evg 46 62' > answer.txt
