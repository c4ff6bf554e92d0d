#!/usr/bin/env bash
printf '%s\n' 'dg r e' > answer.txt
