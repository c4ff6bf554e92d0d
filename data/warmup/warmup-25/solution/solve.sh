#!/usr/bin/env bash
printf '%s\n' 'z k bc' > answer.txt
