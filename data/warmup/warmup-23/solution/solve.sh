#!/usr/bin/env bash
printf '%s\n' '217 104 4' > answer.txt
