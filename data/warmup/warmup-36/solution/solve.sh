#!/usr/bin/env bash
printf '%s\n' '8k2' > answer.txt
