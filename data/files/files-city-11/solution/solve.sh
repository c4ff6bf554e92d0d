#!/usr/bin/env bash
printf '%s\n' 'athens' > answer.txt
