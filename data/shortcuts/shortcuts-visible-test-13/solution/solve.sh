#!/usr/bin/env bash
printf '%s\n' 'z' > answer.txt
