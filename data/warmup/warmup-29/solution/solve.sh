#!/usr/bin/env bash
printf '%s\n' '46 u 55' > answer.txt
