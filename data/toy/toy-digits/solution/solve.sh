#!/usr/bin/env bash
printf '%s\n' '0123456789' > answer.txt
