#!/usr/bin/env bash
printf '%s\n' 'fkz c6 6d 7' > answer.txt
