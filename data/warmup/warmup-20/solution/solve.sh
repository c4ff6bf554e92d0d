#!/usr/bin/env bash
printf '%s\n' 'r 513' > answer.txt
