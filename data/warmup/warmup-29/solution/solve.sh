#!/usr/bin/env bash
printf '%s\n' 'jv 7 sdw' > answer.txt
