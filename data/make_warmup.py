"""Writes data/warmup/: the warm-up tasks of the tiny main job's warm start (warmstart.py). The oracle agent plays
them through the harness and the tiny model is fine-tuned on those demonstrations, so that it calls the harness's
tools before GRPO starts. They teach the form (read around, write answer.txt, stop), never a training task's answer:
each asks to copy a random code of 1-4 words, each of letters or of digits (never a toy task's answer). Graded
exactly (partial credit: the share of the code's words written, times the share of the answer's words that are the
code's). Deterministic; usage: python data/make_warmup.py [OUT_DIR]"""
import random
import sys

from taskgen import fresh_suite_dir, read_helper, write_task

N = 48
LETTERS, DIGITS = "abcdefghjkmnpqrstuvwxyz", "0123456789"
TOY_ANSWERS = {"0123456789", "1 2 3 4 5", "2468", "13579", "01234", "42"}   # make_toy.py's: never a warm-up code
# varied wording, so that the form carries over to instructions worded otherwise (the toy tasks')
ASKS = ["Write the code `{}` into answer.txt.", "Put the text `{}` in a file named answer.txt.",
        "Save `{}` to answer.txt, nothing else.", "Copy this exactly into answer.txt: {}",
        "The answer is `{}`. Write it into answer.txt.", "Create answer.txt holding the characters {} (as given)."]
NOTES = ["", "\n\nPartial answers earn partial credit.", "\n\nOnly answer.txt is graded.",
         "\n\nThe file README.md in your working directory says where the answer goes."]
README = "# Scratch space\n\nPut your answer in answer.txt here.\n"


def code(rng):
    """1-4 words of 1-3 characters, each word letters or digits (a coin flip): the base then writes numbers as often
    as words - the toy tasks' reward has signal from the first step - but is taught no toy answer."""
    while True:
        text = " ".join("".join(rng.choice(chars) for _ in range(rng.randint(1, 3)))
                        for chars in (rng.choice((LETTERS, DIGITS)) for _ in range(rng.randint(1, 4))))
        if text not in TOY_ANSWERS:
            return text


def main(argv):
    out, rng = fresh_suite_dir(argv, "warmup"), random.Random(0)
    for i in range(1, N + 1):
        answer = code(rng)
        write_task(
            out, f"warmup-{i:02d}", source="warmup", type="copy", difficulty="easy", agent_timeout=60,
            verifier_timeout=10, instruction=rng.choice(ASKS).format(answer) + rng.choice(NOTES),
            environment={"README.md": README},
            tests={"test.sh": f'#!/usr/bin/env bash\npython3 -S "$TESTS_DIR/toy_grade.py" exact "$LOGS_DIR" '
                              f'"{answer}"\n', "toy_grade.py": read_helper("toy_grade.py")},
            solution={"solve.sh": f"#!/usr/bin/env bash\nprintf '%s\\n' '{answer}' > answer.txt\n"},
            tags=["warmup", "partial-credit"])


if __name__ == "__main__":
    main(sys.argv)
