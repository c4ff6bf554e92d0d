#!/usr/bin/env bash
printf '%s\n' '270' > answer.txt
