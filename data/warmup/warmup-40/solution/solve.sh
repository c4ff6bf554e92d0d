#!/usr/bin/env bash
printf '%s\n' 'k 0' > answer.txt
