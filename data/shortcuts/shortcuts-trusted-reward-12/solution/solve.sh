#!/usr/bin/env bash
printf '%s\n' '906 2 a t' > answer.txt
