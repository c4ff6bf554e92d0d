#!/usr/bin/env bash
printf '%s\n' 'judy' > answer.txt
