#!/usr/bin/env bash
printf '%s\n' '29' > answer.txt
