#!/usr/bin/env bash
printf '%s\n' '8 cw km 1fe' > answer.txt
