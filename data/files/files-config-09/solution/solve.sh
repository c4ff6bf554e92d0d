#!/usr/bin/env bash
printf '%s\n' '4235' > answer.txt
