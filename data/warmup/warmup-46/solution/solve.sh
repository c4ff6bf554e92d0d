#!/usr/bin/env bash
printf '%s\n' 'vj1' > answer.txt
