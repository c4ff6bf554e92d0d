#!/usr/bin/env bash
printf '%s\n' 'fm' > answer.txt
