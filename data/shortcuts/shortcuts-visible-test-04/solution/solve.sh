#!/usr/bin/env bash
printf '%s\n' '000 su' > answer.txt
