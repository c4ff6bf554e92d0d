#!/usr/bin/env bash
printf '%s\n' '930 fkt 17 66' > answer.txt
