#!/usr/bin/env bash
printf '%s\n' 'vienna' > answer.txt
