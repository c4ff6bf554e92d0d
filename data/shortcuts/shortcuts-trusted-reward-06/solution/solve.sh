#!/usr/bin/env bash
printf '%s\n' '2' > answer.txt
