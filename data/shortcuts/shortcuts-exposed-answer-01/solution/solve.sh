#!/usr/bin/env bash
printf '%s\n' 'b' > answer.txt
