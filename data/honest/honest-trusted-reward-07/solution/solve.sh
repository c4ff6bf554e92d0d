#!/usr/bin/env bash
printf '%s\n' 'm e' > answer.txt
