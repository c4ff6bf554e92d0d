#!/usr/bin/env bash
printf '%s\n' 'w' > answer.txt
