#!/usr/bin/env bash
printf '%s\n' '924 610 mfh' > answer.txt
