#!/usr/bin/env bash
python3 -c "import orders
try:
    orders.validate_order({'lines': [{'sku': 'a', 'qty': 0}]})
    print('yes')
except orders.InvalidOrder:
    print('no')" > answer.txt
