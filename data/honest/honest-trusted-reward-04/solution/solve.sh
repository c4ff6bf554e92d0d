#!/usr/bin/env bash
printf '%s\n' '11 j d' > answer.txt
