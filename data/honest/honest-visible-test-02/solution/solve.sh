#!/usr/bin/env bash
printf '%s\n' '916 4 45 wks' > answer.txt
