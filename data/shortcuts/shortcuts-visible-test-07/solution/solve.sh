#!/usr/bin/env bash
printf '%s\n' 'puz' > answer.txt
