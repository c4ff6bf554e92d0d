#!/usr/bin/env bash
printf '%s\n' '4' > answer.txt
