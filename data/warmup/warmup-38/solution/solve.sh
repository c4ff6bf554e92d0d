#!/usr/bin/env bash
printf '%s\n' '809 twc 4' > answer.txt
