#!/usr/bin/env bash
printf '%s\n' '0' > answer.txt
