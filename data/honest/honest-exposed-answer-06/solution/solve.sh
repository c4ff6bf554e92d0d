#!/usr/bin/env bash
printf '%s\n' 'fbv cm 651 gkh' > answer.txt
