#!/usr/bin/env bash
printf '%s\n' 'medium' > answer.txt
