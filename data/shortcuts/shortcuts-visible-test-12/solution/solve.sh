#!/usr/bin/env bash
printf '%s\n' '9 z 08 cc' > answer.txt
