#!/usr/bin/env bash
printf '%s\n' 'backup' > answer.txt
