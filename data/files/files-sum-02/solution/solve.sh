#!/usr/bin/env bash
printf '%s\n' '41' > answer.txt
