#!/usr/bin/env bash
printf '%s\n' 'berlin' > answer.txt
