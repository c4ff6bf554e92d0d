#!/usr/bin/env bash
printf '%s\n' '1 g' > answer.txt
