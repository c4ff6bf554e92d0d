#!/usr/bin/env bash
printf '%s\n' '4 09' > answer.txt
