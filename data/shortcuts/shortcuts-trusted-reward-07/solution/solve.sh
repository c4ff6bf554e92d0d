#!/usr/bin/env bash
printf '%s\n' 'vc 27 a sf' > answer.txt
