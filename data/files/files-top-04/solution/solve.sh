#!/usr/bin/env bash
printf '%s\n' 'grace' > answer.txt
