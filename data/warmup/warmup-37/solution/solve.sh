#!/usr/bin/env bash
printf '%s\n' 'x88 pra xx k' > answer.txt
