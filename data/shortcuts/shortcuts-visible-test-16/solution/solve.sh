#!/usr/bin/env bash
printf '%s\n' '69' > answer.txt
