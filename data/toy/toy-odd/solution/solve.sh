#!/usr/bin/env bash
printf '%s\n' '13579' > answer.txt
