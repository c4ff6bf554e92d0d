#!/usr/bin/env bash
printf '%s\n' 'heidi' > answer.txt
