#!/usr/bin/env bash
printf '%s\n' '1 b uyp' > answer.txt
