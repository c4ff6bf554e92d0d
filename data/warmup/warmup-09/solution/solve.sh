#!/usr/bin/env bash
printf '%s\n' '8z x h8y' > answer.txt
