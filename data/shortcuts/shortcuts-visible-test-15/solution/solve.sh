#!/usr/bin/env bash
printf '%s\n' 'mxy 714' > answer.txt
