#!/usr/bin/env bash
printf '%s\n' '533' > answer.txt
