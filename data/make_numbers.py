"""Writes data/numbers/: short questions about whole numbers that a small instruct model (SmolLM2-135M)
can partly answer, graded with partial credit by numbers_grade.py - the suite of the CPU recipe on a real
pretrained model. Seven kinds x 6 instances, so the held-out split (15 % by name hash) holds instances of
kinds the training tasks also cover. Deterministic; usage: python data/make_numbers.py [OUT_DIR]"""
import random
import sys

from taskgen import fresh_suite_dir, read_helper, write_task

HOW = ("Answer with only the numbers, separated by spaces: reply with them, or write them into answer.txt "
       "(your reply is graded when answer.txt does not exist). Partial answers earn partial credit.")
README = "# Scratch space\n\nPut your answer in answer.txt here, or reply with it.\n"


def kinds(rng):
    """(kind, question, answer) per instance; numbers drawn from rng so the suite is reproducible."""
    out = []
    for _ in range(6):
        a = rng.randint(1, 12)
        b = a + rng.randint(3, 5)
        n, k = rng.randint(3, 5), rng.randint(2, 6)
        x, y = rng.randint(2, 20), rng.randint(2, 20)
        out += [("count", f"Write the whole numbers from {a} to {b}.", range(a, b + 1)),
                ("countdown", f"Count down from {b} to {a}.", range(b, a - 1, -1)),
                ("even", f"Write the even numbers from {2 * a} to {2 * b}.", range(2 * a, 2 * b + 1, 2)),
                ("odd", f"Write the odd numbers from {2 * a + 1} to {2 * b + 1}.", range(2 * a + 1, 2 * b + 2, 2)),
                ("multiples", f"Write the first {n} multiples of {k}.", range(k, k * n + 1, k)),
                ("add", f"What is {x} plus {y}?", [x + y]),
                ("next", f"Which number comes right after {x + y}?", [x + y + 1])]
    return out


def main(argv):
    out = fresh_suite_dir(argv, "numbers")
    seen = {}
    for kind, question, answer in kinds(random.Random(0)):
        seen[kind] = seen.get(kind, 0) + 1
        expected = " ".join(map(str, answer))
        write_task(
            # 300 s: on a 2-core CPU one engine thread serves 16 sessions while the trainer uses the other
            out, f"numbers-{kind}-{seen[kind]}", source="numbers", type=kind, difficulty="easy",
            agent_timeout=300, verifier_timeout=10, instruction=f"{question}\n\n{HOW}",
            environment={"README.md": README},
            tests={"test.sh": f'#!/usr/bin/env bash\n# Partial credit: see numbers_grade.py.\n'
                              f'python3 -S "$TESTS_DIR/numbers_grade.py" "{expected}" "$LOGS_DIR"\n',
                   "numbers_grade.py": read_helper("numbers_grade.py")},
            solution={"solve.sh": f"#!/usr/bin/env bash\nprintf '%s\\n' '{expected}' > answer.txt\n"},
            tags=["numbers", "partial-credit"])


if __name__ == "__main__":
    main(sys.argv)
