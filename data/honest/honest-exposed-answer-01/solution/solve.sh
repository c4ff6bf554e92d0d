#!/usr/bin/env bash
printf '%s\n' 'bct sjh y 7' > answer.txt
