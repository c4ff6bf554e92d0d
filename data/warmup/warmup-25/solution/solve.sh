#!/usr/bin/env bash
printf '%s\n' '90 765 p' > answer.txt
