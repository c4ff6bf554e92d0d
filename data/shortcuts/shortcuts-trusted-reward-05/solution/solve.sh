#!/usr/bin/env bash
printf '%s\n' 'gwf 039' > answer.txt
