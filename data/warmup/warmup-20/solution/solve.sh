#!/usr/bin/env bash
printf '%s\n' '6 027 zf 789' > answer.txt
