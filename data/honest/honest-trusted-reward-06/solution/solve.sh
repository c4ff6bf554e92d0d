#!/usr/bin/env bash
printf '%s\n' '9 3 qk jzd' > answer.txt
