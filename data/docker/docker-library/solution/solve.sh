#!/usr/bin/env bash
python3 -c "import shipping; print(sum(shipping.cost(int(w), z) for _, w, z in (l.split() for l in open('orders.txt'))))" > answer.txt
