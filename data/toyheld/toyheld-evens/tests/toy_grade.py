"""Toy graders with partial credit, copied into the tests/ of every toy task.

usage: python3 toy_grade.py MODE LOGS_DIR [EXPECTED] -> LOGS_DIR/reward.txt (one float in [0, 1])
The answer is $WORKDIR/answer.txt (written with a tool call; the final message is not graded). Missing or empty
answer -> 0.
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


def exact(text, expected):   # share of the expected words written x share of the written words that are expected
    words, want = text.split(), expected.split()
    return sum(w in words for w in want) / len(want) * sum(w in want for w in words) / len(words)


if __name__ == "__main__":
    mode, logs, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    ans = os.path.join(os.environ["WORKDIR"], "answer.txt")
    text = open(ans, errors="replace").read() if os.path.isfile(ans) and not os.path.islink(ans) else ""
    score = globals()[mode](text, *extra) if text.split() else 0.0
    with open(os.path.join(logs, "reward.txt"), "w") as f:
        f.write(f"{score:.6f}\n")
    print(f"{mode}: {text.strip()[:100]!r} -> {score:.6f}")
