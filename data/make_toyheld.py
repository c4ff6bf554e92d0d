"""Writes data/toyheld/: toy tasks no tiny run trains on or is warm-started with - eval only (suites.APART, never
in "all"): the six toy tasks' checks asked in other words, and two new targets (numbers in a given order, graded
exactly). Evidence that an adapter learned the skill, not the training tasks' wording, on more than the one toy task
the holdout split keeps out. Deterministic; usage: python data/make_toyheld.py [OUT_DIR]"""
import shlex
import sys

from make_toy import write_toy_task
from taskgen import HERE, fresh_suite_dir

TASKS = [  # name, grader mode (toy_grade.py), instruction, oracle answer; worded as no toy or warm-up task is
    ("toyheld-only-digits", "digits", "Fill answer.txt with digits and nothing else.", "987654"),
    ("toyheld-evens", "even_digits", "answer.txt should contain even digits only.", "8642"),
    ("toyheld-odds", "odd_digits", "Put a few odd digits in answer.txt.", "9753"),
    ("toyheld-below-five", "small_digits", "Save some digits that are less than 5 to answer.txt.", "4321"),
    ("toyheld-single", "one_number", "answer.txt must hold a single number.", "7"),
    ("toyheld-one-to-five", "count_to_five", "Count from one to five in answer.txt, the numbers separated by spaces.",
     "1 2 3 4 5"),
    ("toyheld-six-to-eight", "exact", "Write the numbers 6, 7 and 8, separated by spaces, into answer.txt.", "6 7 8"),
    ("toyheld-five-down", "exact", "Write the numbers from 5 down to 1, separated by spaces, into answer.txt.",
     "5 4 3 2 1"),
]


def warmup_codes():
    """The warm-up suite's codes (each task's `toy_grade.py exact LOGS_DIR CODE`): a new target must not be one the
    base copied."""
    codes = set()
    for t in sorted((HERE / "warmup").iterdir()):
        words = shlex.split((t / "tests" / "test.sh").read_text().strip().splitlines()[-1])
        assert words[3] == "exact" and len(words) == 6, f"{t.name}: not an exact-graded warm-up task"
        codes.add(words[-1])
    return codes


def main(argv):
    taught = warmup_codes()
    out = fresh_suite_dir(argv, "toyheld")
    for name, mode, instruction, answer in TASKS:
        assert answer not in taught, f"{name}: {answer!r} is a warm-up code"
        write_toy_task(out, name, mode, instruction, answer, source="toyheld",
                       tags=("toy", "held-out", "partial-credit"), expected=f' "{answer}"' if mode == "exact" else "")


if __name__ == "__main__":
    main(sys.argv)
