#!/usr/bin/env bash
printf '%s\n' 'pxz 4 16' > answer.txt
