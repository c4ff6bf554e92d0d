#!/usr/bin/env bash
printf '%s\n' '30' > answer.txt
