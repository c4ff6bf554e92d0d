"""Writes data/toy/: the CPU demo's tasks, graded with partial credit from answer.txt (so solving them takes a tool
call: the warm-started tiny model makes them, a random one does not): six variations on writing numbers. Deterministic; usage: python data/make_toy.py [OUT_DIR]"""
import sys

from taskgen import fresh_suite_dir, read_helper, write_task

TASKS = [  # name, grader mode, instruction, oracle answer. One theme (numbers), so that a tiny random model
    # can learn the shared skill within minutes on a CPU; the tasks still differ in what earns full credit.
    ("toy-digits", "digits", "Write any digits into answer.txt.", "0123456789"),
    ("toy-count", "count_to_five", "Write the numbers 1 to 5, separated by spaces, into answer.txt.", "1 2 3 4 5"),
    ("toy-even", "even_digits", "Write some even digits (0, 2, 4, 6 or 8) into answer.txt.", "2468"),
    ("toy-odd", "odd_digits", "Write some odd digits (1, 3, 5, 7 or 9) into answer.txt.", "13579"),
    ("toy-small", "small_digits", "Write some digits smaller than 5 into answer.txt.", "01234"),
    ("toy-one-number", "one_number", "Write exactly one number into answer.txt.", "42"),
]

README = "# Scratch space\n\nPut your answer in answer.txt here.\n"


def write_toy_task(out, name, mode, instruction, answer, source="toy", tags=("toy", "partial-credit"), expected=""):
    """One toy task graded by toy_grade.py's `mode` (`expected`: its argument, for exact)."""
    write_task(
        out, name, source=source, type="toy", difficulty="easy", agent_timeout=60, verifier_timeout=10,
        instruction=instruction + "\n\nOnly answer.txt is graded. Partial answers earn partial credit.",
        environment={"README.md": README},
        tests={"test.sh": f'#!/usr/bin/env bash\n# Partial credit: see toy_grade.py ({mode}).\n'
                          f'python3 -S "$TESTS_DIR/toy_grade.py" {mode} "$LOGS_DIR"{expected}\n',
               "toy_grade.py": read_helper("toy_grade.py")},
        solution={"solve.sh": f"#!/usr/bin/env bash\nprintf '%s\\n' '{answer}' > answer.txt\n"},
        tags=list(tags))


def main(argv):
    out = fresh_suite_dir(argv, "toy")
    for name, mode, instruction, answer in TASKS:
        write_toy_task(out, name, mode, instruction, answer)


if __name__ == "__main__":
    main(sys.argv)
