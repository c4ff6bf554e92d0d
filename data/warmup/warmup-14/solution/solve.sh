#!/usr/bin/env bash
printf '%s\n' 'gte e wz4 d' > answer.txt
