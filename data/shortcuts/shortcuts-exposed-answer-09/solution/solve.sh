#!/usr/bin/env bash
printf '%s\n' 's' > answer.txt
