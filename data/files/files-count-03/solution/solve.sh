#!/usr/bin/env bash
printf '%s\n' '1' > answer.txt
