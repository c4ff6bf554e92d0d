#!/usr/bin/env bash
printf '%s\n' 'ABCDEF' > answer.txt
