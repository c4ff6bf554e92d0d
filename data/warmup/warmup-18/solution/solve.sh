#!/usr/bin/env bash
printf '%s\n' '42 cm jeh' > answer.txt
