#!/usr/bin/env bash
printf '%s\n' '9753' > answer.txt
