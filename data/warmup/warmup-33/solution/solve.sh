#!/usr/bin/env bash
printf '%s\n' 'q4 0 t m4p' > answer.txt
