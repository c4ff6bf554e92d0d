#!/usr/bin/env bash
printf '%s\n' '4 h 693' > answer.txt
