#!/usr/bin/env bash
printf '%s\n' '41 q b' > answer.txt
