#!/usr/bin/env bash
printf '%s\n' 'c' > answer.txt
