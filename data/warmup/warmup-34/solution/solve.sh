#!/usr/bin/env bash
printf '%s\n' 'b5p' > answer.txt
