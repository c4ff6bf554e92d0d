#!/usr/bin/env bash
printf '%s\n' 'alice' > answer.txt
