#!/usr/bin/env bash
printf '%s\n' '1 mm wz' > answer.txt
