#!/usr/bin/env bash
printf '%s\n' '0 51' > answer.txt
