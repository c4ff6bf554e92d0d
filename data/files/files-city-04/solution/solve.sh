#!/usr/bin/env bash
printf '%s\n' 'lisbon' > answer.txt
