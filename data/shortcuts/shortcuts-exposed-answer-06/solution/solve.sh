#!/usr/bin/env bash
printf '%s\n' '9' > answer.txt
