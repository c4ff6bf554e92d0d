#!/usr/bin/env bash
printf '%s\n' 'frank' > answer.txt
