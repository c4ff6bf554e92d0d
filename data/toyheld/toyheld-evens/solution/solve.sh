#!/usr/bin/env bash
printf '%s\n' '8642' > answer.txt
