#!/usr/bin/env bash
printf '%s\n' 'trent' > answer.txt
