#!/usr/bin/env bash
printf '%s\n' 'wjf t 2' > answer.txt
