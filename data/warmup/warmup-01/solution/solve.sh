#!/usr/bin/env bash
printf '%s\n' '4 47 382 1' > answer.txt
