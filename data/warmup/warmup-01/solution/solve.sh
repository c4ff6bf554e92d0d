#!/usr/bin/env bash
printf '%s\n' 'ct 82w zq jvj' > answer.txt
