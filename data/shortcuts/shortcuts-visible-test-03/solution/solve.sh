#!/usr/bin/env bash
printf '%s\n' 'wt' > answer.txt
