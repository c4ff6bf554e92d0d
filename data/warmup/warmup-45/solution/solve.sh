#!/usr/bin/env bash
printf '%s\n' '8h 6' > answer.txt
