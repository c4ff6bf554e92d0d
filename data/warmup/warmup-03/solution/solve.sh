#!/usr/bin/env bash
printf '%s\n' 'srt 8 p' > answer.txt
