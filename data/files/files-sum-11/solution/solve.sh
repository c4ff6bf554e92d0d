#!/usr/bin/env bash
printf '%s\n' '52' > answer.txt
