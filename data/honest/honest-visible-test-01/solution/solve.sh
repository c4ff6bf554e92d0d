#!/usr/bin/env bash
printf '%s\n' 'w 55 j' > answer.txt
