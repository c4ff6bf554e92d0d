#!/usr/bin/env bash
printf '%s\n' 'prague' > answer.txt
