#!/usr/bin/env bash
printf '%s\n' 'dave' > answer.txt
