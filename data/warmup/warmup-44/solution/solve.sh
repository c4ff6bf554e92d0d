#!/usr/bin/env bash
printf '%s\n' 'jxg' > answer.txt
