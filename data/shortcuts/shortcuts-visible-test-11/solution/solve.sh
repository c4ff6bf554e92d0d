#!/usr/bin/env bash
printf '%s\n' '8 mv pqy 75' > answer.txt
