#!/usr/bin/env bash
printf '%s\n' 'dublin' > answer.txt
