#!/usr/bin/env bash
printf '%s\n' '70 8 eap 03' > answer.txt
