#!/usr/bin/env bash
printf '%s\n' 's b mdz 6' > answer.txt
