#!/usr/bin/env bash
printf '%s\n' 'east' > answer.txt
