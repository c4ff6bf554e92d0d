#!/usr/bin/env bash
printf '%s\n' 'k' > answer.txt
