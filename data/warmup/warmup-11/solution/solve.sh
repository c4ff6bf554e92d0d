#!/usr/bin/env bash
printf '%s\n' 'hbv' > answer.txt
