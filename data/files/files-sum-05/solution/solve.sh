#!/usr/bin/env bash
printf '%s\n' '51' > answer.txt
