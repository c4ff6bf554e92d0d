#!/usr/bin/env bash
printf '%s\n' 'sx epr k 5ff' > answer.txt
