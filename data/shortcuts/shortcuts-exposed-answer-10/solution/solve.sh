#!/usr/bin/env bash
printf '%s\n' 'jj p 16 nx' > answer.txt
