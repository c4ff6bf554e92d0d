#!/usr/bin/env bash
printf '%s\n' 'c t7e' > answer.txt
