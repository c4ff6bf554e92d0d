#!/usr/bin/env bash
printf '%s\n' '418' > answer.txt
