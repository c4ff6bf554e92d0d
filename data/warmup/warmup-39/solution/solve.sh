#!/usr/bin/env bash
printf '%s\n' 'mk 609 9c fe4' > answer.txt
