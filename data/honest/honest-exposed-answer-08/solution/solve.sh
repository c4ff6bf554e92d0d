#!/usr/bin/env bash
printf '%s\n' 'j 377 70' > answer.txt
