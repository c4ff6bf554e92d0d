#!/usr/bin/env bash
printf '%s\n' '35' > answer.txt
