#!/usr/bin/env bash
printf '%s\n' 'uj 3 bah 66' > answer.txt
