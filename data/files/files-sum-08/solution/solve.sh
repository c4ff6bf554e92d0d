#!/usr/bin/env bash
printf '%s\n' '48' > answer.txt
