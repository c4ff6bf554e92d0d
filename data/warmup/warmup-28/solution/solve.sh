#!/usr/bin/env bash
printf '%s\n' '304' > answer.txt
