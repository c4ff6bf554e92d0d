#!/usr/bin/env bash
while read -r k; do codegen "$k"; done < keys.txt > answer.txt
