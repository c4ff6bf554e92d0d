#!/usr/bin/env bash
printf '%s\n' 'x0c 864 nq' > answer.txt
