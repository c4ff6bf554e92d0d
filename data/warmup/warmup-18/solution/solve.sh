#!/usr/bin/env bash
printf '%s\n' 's zv zjw' > answer.txt
