#!/usr/bin/env bash
printf '%s\n' '933 e 37' > answer.txt
