#!/usr/bin/env bash
printf '%s\n' '4 8 12' > answer.txt
