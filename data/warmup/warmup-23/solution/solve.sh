#!/usr/bin/env bash
printf '%s\n' 'gph' > answer.txt
