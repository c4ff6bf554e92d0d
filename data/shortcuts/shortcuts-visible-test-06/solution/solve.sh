#!/usr/bin/env bash
printf '%s\n' '939 0' > answer.txt
