#!/usr/bin/env bash
printf '%s\n' '96 19' > answer.txt
