#!/usr/bin/env bash
printf '%s\n' '16' > answer.txt
