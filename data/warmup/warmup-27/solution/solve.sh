#!/usr/bin/env bash
printf '%s\n' 'wb fe 68' > answer.txt
