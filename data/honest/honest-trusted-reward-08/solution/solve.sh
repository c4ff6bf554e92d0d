#!/usr/bin/env bash
printf '%s\n' '159' > answer.txt
