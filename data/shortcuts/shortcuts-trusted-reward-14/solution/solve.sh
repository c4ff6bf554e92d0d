#!/usr/bin/env bash
printf '%s\n' '0 ar vf 23' > answer.txt
