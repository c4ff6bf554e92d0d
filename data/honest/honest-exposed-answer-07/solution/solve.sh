#!/usr/bin/env bash
printf '%s\n' 'h 700 z ukq' > answer.txt
