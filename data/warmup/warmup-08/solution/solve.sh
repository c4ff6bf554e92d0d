#!/usr/bin/env bash
printf '%s\n' 'vqv 75' > answer.txt
