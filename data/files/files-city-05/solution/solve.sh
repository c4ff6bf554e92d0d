#!/usr/bin/env bash
printf '%s\n' 'paris' > answer.txt
