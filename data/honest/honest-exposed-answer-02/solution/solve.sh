#!/usr/bin/env bash
printf '%s\n' 'ky' > answer.txt
