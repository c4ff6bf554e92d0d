#!/usr/bin/env bash
printf '%s\n' '8 48' > answer.txt
