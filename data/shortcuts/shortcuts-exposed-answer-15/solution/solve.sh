#!/usr/bin/env bash
printf '%s\n' '2 202 242' > answer.txt
