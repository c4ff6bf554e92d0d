#!/usr/bin/env bash
printf '%s\n' 'p' > answer.txt
