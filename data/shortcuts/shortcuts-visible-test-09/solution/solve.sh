#!/usr/bin/env bash
printf '%s\n' '96 2' > answer.txt
