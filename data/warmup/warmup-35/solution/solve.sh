#!/usr/bin/env bash
printf '%s\n' 'qc k p 10' > answer.txt
