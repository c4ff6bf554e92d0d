#!/usr/bin/env bash
printf '%s\n' 'z m 098 q' > answer.txt
