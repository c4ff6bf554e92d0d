#!/usr/bin/env bash
printf '%s\n' 'tvg 52' > answer.txt
