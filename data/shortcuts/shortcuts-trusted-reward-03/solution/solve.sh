#!/usr/bin/env bash
printf '%s\n' '640 15' > answer.txt
