#!/usr/bin/env bash
printf '%s\n' 'fe 61 kc wg' > answer.txt
