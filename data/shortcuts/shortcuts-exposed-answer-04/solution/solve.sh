#!/usr/bin/env bash
printf '%s\n' 'a rmg' > answer.txt
