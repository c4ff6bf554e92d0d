#!/usr/bin/env bash
printf '%s\n' '1 81' > answer.txt
