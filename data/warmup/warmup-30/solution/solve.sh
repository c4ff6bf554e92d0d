#!/usr/bin/env bash
printf '%s\n' 'yw gg 77y' > answer.txt
