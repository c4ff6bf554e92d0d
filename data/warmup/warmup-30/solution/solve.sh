#!/usr/bin/env bash
printf '%s\n' '04' > answer.txt
