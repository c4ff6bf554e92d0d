#!/usr/bin/env bash
printf '%s\n' '6875' > answer.txt
