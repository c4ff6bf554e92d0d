#!/usr/bin/env bash
printf '%s\n' '389 m 08 we' > answer.txt
