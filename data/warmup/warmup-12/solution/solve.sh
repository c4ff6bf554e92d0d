#!/usr/bin/env bash
printf '%s\n' 'gwv' > answer.txt
