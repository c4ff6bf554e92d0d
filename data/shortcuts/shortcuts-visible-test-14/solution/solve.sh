#!/usr/bin/env bash
printf '%s\n' '215' > answer.txt
