#!/usr/bin/env bash
printf '%s\n' 'v5f 1xs' > answer.txt
