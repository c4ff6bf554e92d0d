#!/usr/bin/env bash
printf '%s\n' '2 0p' > answer.txt
