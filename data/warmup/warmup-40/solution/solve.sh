#!/usr/bin/env bash
printf '%s\n' '1r a nw9 tye' > answer.txt
