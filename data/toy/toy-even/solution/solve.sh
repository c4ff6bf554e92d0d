#!/usr/bin/env bash
printf '%s\n' '2468' > answer.txt
