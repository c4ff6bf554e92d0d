#!/usr/bin/env bash
printf '%s\n' 'u 7' > answer.txt
