#!/usr/bin/env bash
printf '%s\n' '702 hur jp' > answer.txt
