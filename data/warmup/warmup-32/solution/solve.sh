#!/usr/bin/env bash
printf '%s\n' '79 cn vf 5' > answer.txt
