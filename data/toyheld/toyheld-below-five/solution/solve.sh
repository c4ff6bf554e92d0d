#!/usr/bin/env bash
printf '%s\n' '4321' > answer.txt
