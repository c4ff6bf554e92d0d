#!/usr/bin/env bash
printf '%s\n' '668 80 255 585' > answer.txt
