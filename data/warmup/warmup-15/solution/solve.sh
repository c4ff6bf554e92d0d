#!/usr/bin/env bash
printf '%s\n' 'g2p' > answer.txt
