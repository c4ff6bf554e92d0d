#!/usr/bin/env bash
printf '%s\n' 'bmq 18 cgt' > answer.txt
