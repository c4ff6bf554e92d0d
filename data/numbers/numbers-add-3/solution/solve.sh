#!/usr/bin/env bash
printf '%s\n' '15' > answer.txt
