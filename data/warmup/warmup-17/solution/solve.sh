#!/usr/bin/env bash
printf '%s\n' 'z1t a fy' > answer.txt
