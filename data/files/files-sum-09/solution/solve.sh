#!/usr/bin/env bash
printf '%s\n' '26' > answer.txt
