#!/usr/bin/env bash
printf '%s\n' 'aaaa' > answer.txt
