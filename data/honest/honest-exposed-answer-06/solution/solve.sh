#!/usr/bin/env bash
printf '%s\n' 'n 17 91' > answer.txt
