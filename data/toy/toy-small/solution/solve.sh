#!/usr/bin/env bash
printf '%s\n' '01234' > answer.txt
