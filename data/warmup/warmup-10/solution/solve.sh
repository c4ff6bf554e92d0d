#!/usr/bin/env bash
printf '%s\n' 'uhr' > answer.txt
