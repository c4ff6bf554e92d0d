#!/usr/bin/env bash
printf '%s\n' '37' > answer.txt
