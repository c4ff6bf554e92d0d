#!/usr/bin/env bash
printf '%s\n' 'hf qrc y ss' > answer.txt
