#!/usr/bin/env bash
printf '%s\n' 'q 1 1' > answer.txt
