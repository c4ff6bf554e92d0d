"""Toy graders with partial credit, copied into the tests/ of every toy task.

usage: python3 toy_grade.py MODE LOGS_DIR -> LOGS_DIR/reward.txt (one float in [0, 1])
The answer is $WORKDIR/answer.txt when it exists, else the agent's final message ($AGENT_OUTPUT), so a
tiny model that never manages a tool call still earns partial credit. Empty answer -> 0.
"""
import os
import sys


def _share(text, ok):      # fraction of the non-space characters for which ok(c) holds
    chars = [c for c in text if not c.isspace()]
    return sum(ok(c) for c in chars) / len(chars)


def digits(text):         # fraction of the non-space characters that are digits
    return _share(text, str.isdigit)


def even_digits(text):    # fraction of the non-space characters that are 0, 2, 4, 6 or 8
    return _share(text, lambda c: c in "02468")


def odd_digits(text):     # fraction of the non-space characters that are 1, 3, 5, 7 or 9
    return _share(text, lambda c: c in "13579")


def small_digits(text):   # fraction of the non-space characters that are digits below 5
    return _share(text, lambda c: c in "01234")


def one_number(text):     # 1 / number of words, times the fraction of the characters that are digits
    return 1 / len(text.split()) * _share(text, str.isdigit)


def count_to_five(text):  # fraction of the characters that are the digits 1-5, times how many of 1..5 appear
    present = sum(d in text for d in "12345") / 5
    return present * _share(text, lambda c: c in "12345")


if __name__ == "__main__":
    mode, logs = sys.argv[1], sys.argv[2]
    ans = os.path.join(os.environ["WORKDIR"], "answer.txt")
    with open(ans if os.path.isfile(ans) else os.environ["AGENT_OUTPUT"], errors="replace") as f:
        text = f.read()
    score = globals()[mode](text) if text.split() else 0.0
    with open(os.path.join(logs, "reward.txt"), "w") as f:
        f.write(f"{score:.6f}\n")
    print(f"{mode}: {text.strip()[:100]!r} -> {score:.6f}")
