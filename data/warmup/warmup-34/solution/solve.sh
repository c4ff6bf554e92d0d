#!/usr/bin/env bash
printf '%s\n' 'w g' > answer.txt
