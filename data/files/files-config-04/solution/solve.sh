#!/usr/bin/env bash
printf '%s\n' '136' > answer.txt
