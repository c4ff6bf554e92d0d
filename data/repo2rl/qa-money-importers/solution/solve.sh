#!/usr/bin/env bash
printf '%s\n' 'cart, invoice, refunds' > answer.txt
