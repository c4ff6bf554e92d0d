#!/usr/bin/env bash
printf '%s\n' '70 uq euv' > answer.txt
