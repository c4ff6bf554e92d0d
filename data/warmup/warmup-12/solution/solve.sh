#!/usr/bin/env bash
printf '%s\n' 'h2f hc' > answer.txt
