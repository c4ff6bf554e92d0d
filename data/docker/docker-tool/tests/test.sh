#!/usr/bin/env bash
# codegen's code for each key
python3 - "$LOGS_DIR" <<'EOF'
import os, sys
want = ['240506', '467409', '793491']
try:
    got = open(os.path.join(os.environ["WORKDIR"], "answer.txt")).read().split()
except OSError:
    got = []
ok = got == want
print("answer.txt:", got, "expected:", want, "->", int(ok))
open(os.path.join(sys.argv[1], "reward.txt"), "w").write("1\n" if ok else "0\n")
EOF
