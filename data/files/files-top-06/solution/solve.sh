#!/usr/bin/env bash
printf '%s\n' 'wendy' > answer.txt
