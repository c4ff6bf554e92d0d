#!/usr/bin/env bash
printf '%s\n' '125 9' > answer.txt
