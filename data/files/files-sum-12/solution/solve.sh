#!/usr/bin/env bash
printf '%s\n' '43' > answer.txt
