#!/usr/bin/env bash
printf '%s\n' 'q 35 8' > answer.txt
