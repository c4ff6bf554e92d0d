#!/usr/bin/env bash
printf '%s\n' 'fy ccu k' > answer.txt
