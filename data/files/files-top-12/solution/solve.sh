#!/usr/bin/env bash
printf '%s\n' 'erin' > answer.txt
