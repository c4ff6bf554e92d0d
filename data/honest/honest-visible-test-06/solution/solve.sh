#!/usr/bin/env bash
printf '%s\n' 'dan 40' > answer.txt
