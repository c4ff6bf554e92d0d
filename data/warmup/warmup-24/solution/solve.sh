#!/usr/bin/env bash
printf '%s\n' 'ng 2f u' > answer.txt
