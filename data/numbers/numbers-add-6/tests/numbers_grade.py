"""Graders of the numbers suite, copied into the tests/ of every numbers task. Partial credit, so a small
instruct model's first, wordy answers already earn some reward and GRPO has a signal.

usage: python3 numbers_grade.py "EXPECTED" LOGS_DIR -> LOGS_DIR/reward.txt (one float in [0, 1])
EXPECTED is the exact answer, numbers separated by spaces ("3 4 5 6"). The answer read is $WORKDIR/answer.txt
when it exists, else the agent's final message ($AGENT_OUTPUT).
score = recall x precision x order: the share of the expected numbers that appear, times the share of the
answer's words that are expected numbers, times (expected count / numbers found) when there are more,
halved when they appear out of order. "3 4 5 6" and "3, 4, 5, 6." earn 1.0; a sentence around them, a
missing or extra number, or "6 5 4 3" earn less. Empty answer -> 0.
"""
import os
import re
import sys


def score(text, expected):
    want, words = expected.split(), text.split()
    if not words:
        return 0.0
    found = re.findall(r"-?\d+", text)
    recall = sum(w in found for w in set(want)) / len(set(want))
    hits = sum(w.strip(".,;:!?()[]'\"") in want for w in words)     # words that are an expected number
    extra = len(want) / max(len(found), len(want))                      # numbers beyond the expected count
    firsts = list(dict.fromkeys(n for n in found if n in want))
    order = 1.0 if firsts == [w for w in want if w in firsts] else 0.5  # "6 5 4 3" is not "3 4 5 6"
    return recall * (hits / len(words)) * extra * order


if __name__ == "__main__":
    expected, logs = sys.argv[1], sys.argv[2]
    ans = os.path.join(os.environ["WORKDIR"], "answer.txt")
    with open(ans if os.path.isfile(ans) else os.environ["AGENT_OUTPUT"], errors="replace") as f:
        text = f.read()
    s = score(text, expected)
    with open(os.path.join(logs, "reward.txt"), "w") as f:
        f.write(f"{s:.6f}\n")
    print(f"expected {expected!r}: {text.strip()[:100]!r} -> {s:.6f}")
