#!/usr/bin/env bash
printf '%s\n' '60' > answer.txt
