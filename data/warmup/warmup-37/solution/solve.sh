#!/usr/bin/env bash
printf '%s\n' 't h k mf' > answer.txt
