#!/usr/bin/env bash
printf '%s\n' 'dsg auq' > answer.txt
