#!/usr/bin/env bash
printf '%s\n' 'vjm' > answer.txt
