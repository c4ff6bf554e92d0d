#!/usr/bin/env bash
printf '%s\n' '317' > answer.txt
