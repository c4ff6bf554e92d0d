#!/usr/bin/env bash
printf '%s\n' '28' > answer.txt
