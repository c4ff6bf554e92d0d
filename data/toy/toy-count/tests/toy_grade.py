"""Toy graders with partial credit, copied into the tests/ of every toy task.

usage: python3 toy_grade.py MODE LOGS_DIR -> LOGS_DIR/reward.txt (one float in [0, 1])
The answer is $WORKDIR/answer.txt when it exists, else the agent's final message ($AGENT_OUTPUT), so a
tiny model that never manages a tool call still earns partial credit. Empty answer -> 0.
"""
import os
import sys


def digits(text):         # fraction of the non-space characters that are digits
    chars = [c for c in text if not c.isspace()]
    return sum(c.isdigit() for c in chars) / len(chars)


def letter_a(text):       # fraction of the non-space characters that are the letter a
    chars = [c for c in text if not c.isspace()]
    return sum(c in "aA" for c in chars) / len(chars)


def upper(text):          # fraction of the non-space characters that are upper-case letters
    chars = [c for c in text if not c.isspace()]
    return sum(c.isupper() for c in chars) / len(chars)


def one_word(text):       # 1 / number of words
    return 1 / len(text.split())


def count_to_five(text):  # fraction of 1..5 present as words, times the fraction of words that are them
    words = text.replace(",", " ").split()
    want = ["1", "2", "3", "4", "5"]
    return sum(w in words for w in want) / 5 * sum(w in want for w in words) / len(words)


def say_ok(text):         # fraction of words that are "ok"
    words = text.split()
    return sum(w.strip(".,!").lower() == "ok" for w in words) / len(words)


if __name__ == "__main__":
    mode, logs = sys.argv[1], sys.argv[2]
    ans = os.path.join(os.environ["WORKDIR"], "answer.txt")
    with open(ans if os.path.isfile(ans) else os.environ["AGENT_OUTPUT"], errors="replace") as f:
        text = f.read()
    score = globals()[mode](text) if text.split() else 0.0
    with open(os.path.join(logs, "reward.txt"), "w") as f:
        f.write(f"{score:.6f}\n")
    print(f"{mode}: {text.strip()[:100]!r} -> {score:.6f}")
