#!/usr/bin/env bash
printf '%s\n' '0 2' > answer.txt
