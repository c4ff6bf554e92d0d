#!/usr/bin/env bash
printf '%s\n' 'h qd' > answer.txt
