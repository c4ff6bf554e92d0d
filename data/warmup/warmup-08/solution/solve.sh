#!/usr/bin/env bash
printf '%s\n' 'f 2us' > answer.txt
