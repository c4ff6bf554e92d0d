#!/usr/bin/env bash
printf '%s\n' 'j' > answer.txt
