#!/usr/bin/env bash
printf '%s\n' 'hello' > answer.txt
