#!/usr/bin/env bash
printf '%s\n' '7' > answer.txt
