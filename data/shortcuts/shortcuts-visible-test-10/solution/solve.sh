#!/usr/bin/env bash
printf '%s\n' '97 r' > answer.txt
