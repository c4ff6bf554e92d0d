#!/usr/bin/env bash
printf '%s\n' 'eqb 56 6 u' > answer.txt
