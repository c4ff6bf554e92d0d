#!/usr/bin/env bash
printf '%s\n' '5 cv 46 4' > answer.txt
