#!/usr/bin/env bash
printf '%s\n' '89 j' > answer.txt
