#!/usr/bin/env bash
printf '%s\n' '79 ygb' > answer.txt
