#!/usr/bin/env bash
printf '%s\n' '17' > answer.txt
