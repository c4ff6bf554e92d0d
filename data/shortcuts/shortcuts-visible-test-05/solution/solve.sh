#!/usr/bin/env bash
printf '%s\n' '85 nmg 79 y' > answer.txt
