#!/usr/bin/env bash
# the total of shipping.cost over orders.txt
python3 - "$LOGS_DIR" <<'EOF'
import os, sys
want = ['378']
try:
    got = open(os.path.join(os.environ["WORKDIR"], "answer.txt")).read().split()
except OSError:
    got = []
ok = got == want
print("answer.txt:", got, "expected:", want, "->", int(ok))
open(os.path.join(sys.argv[1], "reward.txt"), "w").write("1\n" if ok else "0\n")
EOF
