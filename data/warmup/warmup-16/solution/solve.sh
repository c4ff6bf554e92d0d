#!/usr/bin/env bash
printf '%s\n' 'mqd mmy th5 na7' > answer.txt
