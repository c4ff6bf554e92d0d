#!/usr/bin/env bash
printf '%s\n' 'madrid' > answer.txt
