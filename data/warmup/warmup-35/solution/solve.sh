#!/usr/bin/env bash
printf '%s\n' 'w 9 687' > answer.txt
