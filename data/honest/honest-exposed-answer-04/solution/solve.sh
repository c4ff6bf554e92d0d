#!/usr/bin/env bash
printf '%s\n' '863 e ss t' > answer.txt
