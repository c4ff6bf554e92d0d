#!/usr/bin/env bash
printf '%s\n' '9 93 3' > answer.txt
