#!/usr/bin/env bash
printf '%s\n' '6 zmd' > answer.txt
