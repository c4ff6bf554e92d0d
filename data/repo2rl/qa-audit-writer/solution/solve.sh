#!/usr/bin/env bash
printf '%s\n' approve_refund > answer.txt
