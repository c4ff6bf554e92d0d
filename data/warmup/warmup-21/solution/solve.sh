#!/usr/bin/env bash
printf '%s\n' 'cm5 t m58 ac8' > answer.txt
