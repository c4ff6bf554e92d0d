"""Grader of the files suite, copied into the tests/ of every files task.

usage: python3 files_grade.py EXPECTED LOGS_DIR -> LOGS_DIR/reward.txt (one float in [0, 1])
EXPECTED is one word or number. The answer read is $WORKDIR/answer.txt when it exists, else the agent's final
message ($AGENT_OUTPUT). Words are compared without case and surrounding punctuation, numbers by value ("17.0" is
17). score = 1 / (number of words) when the expected one is among them, else 0: "17" and "17." earn 1.0, "The
answer is 17." 0.25, a wrong or empty answer 0.
"""
import os
import sys

STRIP = ".,;:!?()[]{}'\"`*"


def same(word, expected):
    if word == expected:
        return True
    try:
        return float(word) == float(expected)
    except ValueError:
        return False


def score(text, expected):
    words = [w.strip(STRIP).lower() for w in text.split()]
    words = [w for w in words if w]
    if not words:
        return 0.0
    return 1 / len(words) if any(same(w, expected.lower()) for w in words) else 0.0


if __name__ == "__main__":
    expected, logs = sys.argv[1], sys.argv[2]
    ans = os.path.join(os.environ["WORKDIR"], "answer.txt")
    path = ans if os.path.isfile(ans) and not os.path.islink(ans) else os.environ["AGENT_OUTPUT"]
    text = open(path, errors="replace").read() if os.path.isfile(path) else ""
    s = score(text, expected)
    with open(os.path.join(logs, "reward.txt"), "w") as f:
        f.write(f"{s:.6f}\n")
    print(f"expected {expected!r}: {text.strip()[:100]!r} -> {s:.6f}")
