#!/usr/bin/env bash
printf '%s\n' '15 14 13 12' > answer.txt
