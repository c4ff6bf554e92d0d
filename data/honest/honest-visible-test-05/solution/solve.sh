#!/usr/bin/env bash
printf '%s\n' 'hyk r 03' > answer.txt
