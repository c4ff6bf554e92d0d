#!/usr/bin/env bash
printf '%s\n' '50' > answer.txt
