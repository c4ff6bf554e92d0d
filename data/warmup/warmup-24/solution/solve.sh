#!/usr/bin/env bash
printf '%s\n' 'ab' > answer.txt
