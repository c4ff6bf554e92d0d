#!/usr/bin/env bash
printf '%s\n' 'uuj 482 zb w' > answer.txt
