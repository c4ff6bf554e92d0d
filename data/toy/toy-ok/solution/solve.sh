#!/usr/bin/env bash
printf '%s\n' 'ok' > answer.txt
