#!/usr/bin/env bash
printf '%s\n' 'fw np 680 nwe' > answer.txt
