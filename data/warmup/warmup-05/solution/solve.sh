#!/usr/bin/env bash
printf '%s\n' 'vh' > answer.txt
