#!/usr/bin/env bash
printf '%s\n' '24 26 28 30' > answer.txt
