#!/usr/bin/env bash
printf '%s\n' '92' > answer.txt
