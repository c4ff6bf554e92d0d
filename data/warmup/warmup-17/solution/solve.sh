#!/usr/bin/env bash
printf '%s\n' '419 207' > answer.txt
