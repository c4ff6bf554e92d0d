#!/usr/bin/env bash
printf '%s\n' '11 m jsv' > answer.txt
