#!/usr/bin/env bash
printf '%s\n' '25' > answer.txt
