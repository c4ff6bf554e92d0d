#!/usr/bin/env bash
printf '%s\n' '3 f ja2 3xa' > answer.txt
