#!/usr/bin/env bash
printf '%s\n' 'oscar' > answer.txt
