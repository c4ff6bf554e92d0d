#!/usr/bin/env bash
printf '%s\n' 'oslo' > answer.txt
