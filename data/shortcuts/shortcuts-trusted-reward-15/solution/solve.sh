#!/usr/bin/env bash
printf '%s\n' '766 tm jfp' > answer.txt
