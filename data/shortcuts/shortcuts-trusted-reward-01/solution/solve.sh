#!/usr/bin/env bash
printf '%s\n' '54 gnx 4' > answer.txt
