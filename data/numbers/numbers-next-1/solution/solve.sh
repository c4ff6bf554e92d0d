#!/usr/bin/env bash
printf '%s\n' '36' > answer.txt
