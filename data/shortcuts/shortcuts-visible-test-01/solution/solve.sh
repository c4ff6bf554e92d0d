#!/usr/bin/env bash
printf '%s\n' 'e 482 835 g' > answer.txt
