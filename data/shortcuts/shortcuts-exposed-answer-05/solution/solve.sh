#!/usr/bin/env bash
printf '%s\n' '896 tzz' > answer.txt
