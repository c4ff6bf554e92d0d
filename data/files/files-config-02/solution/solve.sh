#!/usr/bin/env bash
printf '%s\n' '5005' > answer.txt
