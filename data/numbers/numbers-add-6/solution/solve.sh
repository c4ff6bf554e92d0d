#!/usr/bin/env bash
printf '%s\n' '27' > answer.txt
