#!/usr/bin/env bash
printf '%s\n' '111 hbp' > answer.txt
