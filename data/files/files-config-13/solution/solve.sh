#!/usr/bin/env bash
printf '%s\n' '3' > answer.txt
