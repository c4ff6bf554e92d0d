#!/usr/bin/env bash
printf '%s\n' 'q75 tda 2' > answer.txt
