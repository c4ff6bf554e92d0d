#!/usr/bin/env bash
printf '%s\n' '987654' > answer.txt
