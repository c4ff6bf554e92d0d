#!/usr/bin/env bash
printf '%s\n' 'v7e c r c' > answer.txt
