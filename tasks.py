"""Tasks: Harbor-layout task directories, loading, the six checks, the holdout split.

A task is instruction.md, task.toml (Harbor's schema 1.4, as Harbor 0.25 writes it; a name "org/name" is "name"
here), environment/ (the agent's files), tests/test.sh (the verifier) and solution/solve.sh (the oracle). `[guard]`
(ours, optional): allow_rules (rule ids the task legitimately triggers), allow_paths (globs the guard must not treat
as oracle/test/reward files), allow_hosts (plus `[environment] allowed_hosts`). Suites: suites.py; running a task:
taskenv.py.

Left out: what only a container backend honours (refused, one line naming the key or the Dockerfile's line), the
ladder's last SmolDataEnvs step (symbolic equivalence), and leakage of answers shorter than 12 characters
(indistinguishable from ordinary data).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import containers
import harborenv
from sandbox import SANDBOXES, resolve_sandbox
import taskenv
from guard import RULES
from suites import SUITES, TaskError, resolve_suites, task_dirs

GUARD_RULES = RULES                           # the rule ids a task's [guard] allow_rules may name
CHECKS = {1: "schema", 2: "materialize", 3: "oracle", 4: "degenerate", 5: "deterministic", 6: "leakage"}


@dataclass
class Task:
    name: str
    path: Path
    source: str                  # "smoldata" | "repo2rl" | "toy" | whatever a user's suite says
    type: str                    # "analysis" | "repair" | "qa" | "build" | "extend" | "toy" ...
    difficulty: str
    instruction: str
    agent_timeout: float = 600.0
    verifier_timeout: float = 60.0
    guard: dict = field(default_factory=lambda: {"allow_rules": [], "allow_paths": [], "allow_hosts": []})
    tags: list = field(default_factory=list)
    config: dict = field(default_factory=dict)   # the whole task.toml
    container: taskenv.Container = field(default_factory=taskenv.Container)   # environment/Dockerfile, as honoured


@dataclass
class Failure:
    check: int
    name: str
    reason: str


# ----------------------------------------------------------------------------- loading

def load_task(path) -> Task:
    """One task directory -> Task. Raises TaskError naming the file at fault."""
    path = Path(path).resolve()
    toml_path, instr_path, test_path = path / "task.toml", path / "instruction.md", path / "tests" / "test.sh"
    if not toml_path.is_file():
        raise TaskError(f"{toml_path}: missing (every task needs task.toml)")
    try:
        cfg = tomllib.loads(toml_path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise TaskError(f"{toml_path}: bad TOML: {e}") from None
    if not instr_path.is_file() or not instr_path.read_text().strip():
        raise TaskError(f"{instr_path}: missing or empty (every task needs an instruction)")
    if not test_path.is_file():
        raise TaskError(f"{test_path}: missing (every task needs a verifier script)")

    def table(key):
        t = cfg.get(key, {})
        if not isinstance(t, dict):
            raise TaskError(f"{toml_path}: [{key}] must be a table")
        return t

    def seconds(key, default):
        v = table(key).get("timeout_sec", default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise TaskError(f"{toml_path}: [{key}] timeout_sec must be a positive number, got {v!r}")
        return float(v)

    meta, env, guard_cfg = table("metadata"), table("environment"), table("guard")
    if why := _cannot_honour(cfg, env):
        raise TaskError(f"{toml_path}: {why}")
    guard = {}
    for key in ("allow_rules", "allow_paths", "allow_hosts"):
        v = guard_cfg.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise TaskError(f"{toml_path}: [guard] {key} must be a list of strings")
        guard[key] = list(v)
    bad = sorted(set(guard["allow_rules"]) - set(GUARD_RULES))
    if bad:
        raise TaskError(f"{toml_path}: [guard] allow_rules has unknown rule ids {bad}; known: {list(GUARD_RULES)}")
    unknown = sorted(set(guard_cfg) - set(guard))
    if unknown:
        raise TaskError(f"{toml_path}: [guard] has unknown keys {unknown}")
    guard["allow_hosts"] += [h for h in env.get("allowed_hosts", []) if h not in guard["allow_hosts"]]
    for key in ("verifier", "solution"):        # checked now (a ${VAR} not set here too), read when they run
        taskenv.resolve_env(table(key).get("env", {}), f"{toml_path}: [{key}] env")
    suite = path.parent.name
    return Task(
        name=str(table("task").get("name") or path.name).rsplit("/", 1)[-1],     # Harbor's org/name: the name
        path=path,
        source=str(meta.get("source") or (suite if suite in SUITES else "other")),
        type=str(meta.get("type") or meta.get("category") or "unknown"),
        difficulty=str(meta.get("difficulty", "unknown")),
        instruction=instr_path.read_text(),
        agent_timeout=seconds("agent", 600.0),
        verifier_timeout=seconds("verifier", 60.0),
        guard=guard,
        tags=list(meta.get("tags", [])),
        config=cfg,
        container=taskenv.container(path, cfg),
    )


def _cannot_honour(cfg, env):
    """Why this trainer cannot run a task.toml as Harbor would (one line), or None. Harbor's keys that only
    a container backend honours are refused, not ignored; network_mode / allow_internet are left to the guard."""
    if cfg.get("steps"):
        return "[[steps]] (a multi-step task) is not supported here: one instruction, one verifier per task"
    if str(env.get("os", "linux")).lower() != "linux":
        return f"[environment] os = {env['os']!r}: only linux tasks run here"
    if env.get("docker_image"):
        return f"[environment] docker_image = {env['docker_image']!r} needs a container engine; none runs here"
    verifier = cfg.get("verifier") or {}
    if verifier.get("environment_mode") == "separate" or verifier.get("environment"):
        return ("[verifier] runs in a separate container (environment_mode = \"separate\" or [verifier.environment]): "
                "needs a container backend; here the verifier shares the agent's environment (\"shared\")")
    for key in ("gpus", "tpu", "mcp_servers", "healthcheck"):
        if env.get(key):
            return f"[environment] {key} is not supported here (no container backend: see tasks.py's docstring)"
    return None


def load_tasks(path_or_suite, split=None, seed=None, manifest=None, rule=None, check=False, workers=None) -> list[Task]:
    """All tasks under a folder or suite spec (suites.resolve_suites). split None / "train" / "eval": by `manifest`
    (split_manifest's dict or JSON path), else by `rule` and `seed`. Every malformed task is reported in one
    TaskError. check=True runs the six checks and drops failing tasks (reported on stderr)."""
    if split not in (None, "train", "eval"):
        raise ValueError(f"split must be None, 'train' or 'eval', not {split!r}")
    if split is not None and manifest is None and (rule is None or seed is None):
        raise ValueError("load_tasks(split=...) needs manifest=, or rule= (recipe.py's HOLDOUT) and seed=")
    tasks, errors, seen = [], [], {}
    for d in dict.fromkeys(d.resolve() for r in resolve_suites(path_or_suite) for d in task_dirs(r)):
        try:
            t = load_task(d)
        except TaskError as e:
            errors.append(str(e))
            continue
        if t.name in seen:
            errors.append(f"{d / 'task.toml'}: duplicate task name {t.name!r} (also {seen[t.name]})")
            continue
        seen[t.name] = d
        tasks.append(t)
    if errors:
        raise TaskError(f"{len(errors)} malformed task(s) under {path_or_suite}:\n  " + "\n  ".join(errors))
    if split is not None:
        if manifest is not None:
            m = manifest if isinstance(manifest, dict) else json.loads(Path(manifest).read_text())
            held = set(m["eval"])
        else:
            held = holdout(tasks, rule, seed)
        tasks = [t for t in tasks if (t.name in held) == (split == "eval")]
    if check:
        report = check_tasks([t.path for t in tasks], workers)
        for path, fails in report.items():
            for f in fails:
                print(f"tasks: dropped {path}: check {f.check} ({f.name}): {f.reason}", file=sys.stderr)
        tasks = [t for t in tasks if not report[t.path]]
    return tasks


# ----------------------------------------------------------------------------- holdout

def _rank(name, seed):
    return hashlib.sha256(f"{seed}/{name}".encode()).hexdigest()


def held_out(n, source, rule) -> int:
    """How many of a source's n tasks are held out: rule["counts"][source] once the source has twice as many
    (training keeps at least as many as are held out); else, or for a source the rule does not name,
    round(rule["fraction"] * n), at least 1 of a source with 2 or more tasks, none of a lone task."""
    k = rule["counts"].get(source)
    if k is not None and n >= 2 * k:
        return k
    return max(1, round(rule["fraction"] * n)) if n >= 2 else 0


def holdout(tasks, rule, seed) -> set[str]:
    """Names of the held-out (eval) tasks: per source, the held_out(...) lowest ranks of sha256(seed/name)."""
    by_source = {}
    for t in tasks:
        by_source.setdefault(t.source, []).append(t.name)
    held = set()
    for source, names in by_source.items():
        held.update(sorted(names, key=lambda s: _rank(s, seed))[:held_out(len(names), source, rule)])
    return held


def split_manifest(tasks, rule, seed) -> dict:
    """The split as JSON-ready data with its rule, for a run to save (and pass back as load_tasks(manifest=))."""
    held = holdout(tasks, rule, seed)
    counts = {}
    for t in tasks:
        c = counts.setdefault(t.source, {"train": 0, "eval": 0})
        c["eval" if t.name in held else "train"] += 1
    return {"seed": seed, "holdout": {"counts": dict(rule["counts"]), "fraction": rule["fraction"]},
            "rule": f"per source, the lowest sha256('{seed}/name'): {dict(rule['counts'])} held out of a source "
                    f"with at least twice as many tasks, else {rule['fraction']:.0%} (at least 1 of 2 or more)",
            "counts": counts, "eval": sorted(held), "train": sorted(t.name for t in tasks if t.name not in held)}


# ----------------------------------------------------------------------------- the six checks

STOP_PREFIXES = ("import ", "from ", "#", "def ", "class ", "@", "if __name__", "set -", "cd ")


def _distinctive(text, min_len):
    """Lines long and specific enough that seeing one elsewhere means it was copied."""
    lines = set()
    for line in text.splitlines():
        s = " ".join(line.split())
        if len(s) >= min_len and not s.startswith(STOP_PREFIXES):
            lines.add(s)
    return lines


def _files(root, limit=1 << 20):
    """rel path -> bytes for the regular files under root (skipping caches and big files)."""
    root, out = Path(root), {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts and p.stat().st_size <= limit:
            out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out


def _text(b):
    return "" if b"\0" in b else b.decode("utf-8", errors="replace")


def _leaks(task, before, after):
    """Check 6. before/after: the work dir's files before and after the oracle ran."""
    problems = []
    secret = {f"{kind}/{rel}": b for kind in ("tests", "solution") for rel, b in _files(task.path / kind).items()}
    copies = {hashlib.sha256(b).digest(): name for name, b in secret.items() if len(b.strip()) >= 16}
    for rel, b in before.items():
        if hashlib.sha256(b).digest() in copies:
            problems.append(f"environment/{rel} is a copy of {copies[hashlib.sha256(b).digest()]}")
    haystack = {"instruction.md": _distinctive(task.instruction, 12)}
    haystack |= {f"environment/{rel}": _distinctive(_text(b), 12) for rel, b in before.items()}
    env_lines = set().union(*haystack.values()) - haystack["instruction.md"]

    def first_hit(lines, where, skip=None):
        for line in sorted(lines):
            hits = [h for h in where if line in haystack[h] and h != skip]
            if hits:
                return f"{line[:60]!r} appears in {hits[0]}"
    for name, b in secret.items():
        if name.startswith("tests/"):             # hidden test content, anywhere the agent can read
            hit = first_hit(_distinctive(_text(b), 24), haystack)
        else:                                     # oracle code the environment does not already hold
            hit = first_hit(_distinctive(_text(b), 12) - env_lines, ["instruction.md"])
        if hit:
            problems.append(f"{name} line {hit}")
    for rel, b in after.items():                 # what the oracle wrote that the file did not have
        if before.get(rel) != b:
            new = _distinctive(_text(b), 12) - _distinctive(_text(before.get(rel, b"")), 12)
            hit = first_hit(new, haystack, skip=f"environment/{rel}")
            if hit:
                problems.append(f"the oracle's output line (in {rel}) {hit}")
    return problems


def _expected(task):
    """The files a fresh work dir should hold: environment/'s (Docker's own left out), or what the Dockerfile COPYs."""
    env = task.path / "environment"
    if not task.container.dockerfile:
        return {rel for rel in _files(env) if rel not in taskenv.DOCKER_FILES}
    out = set()
    for src, rel in task.container.copies:
        files = {r for r in _files(src) if src != env or r not in taskenv.DOCKER_FILES} if src.is_dir() else {""}
        out |= {os.path.normpath(os.path.join(rel, r)) for r in files}
    return out


def check_task(task_dir, sandbox="dir") -> list[Failure]:
    """Run the six checks on one task directory; [] when it passes. Anything that goes wrong inside a check
    (a broken task, an oracle that deletes its tests) is that check's failure, with the message - never an
    exception that ends the other tasks' checks. sandbox="bwrap": the oracle and the verifier run sandboxed."""
    stage = [1]
    try:
        return _check_task(Path(task_dir), sandbox, stage)
    except Exception as e:          # noqa: BLE001 - reported as the failing check, with its message
        return [Failure(stage[0], CHECKS[stage[0]], f"{type(e).__name__}: {e}")]


def _check_task(task_dir, sandbox, stage):
    try:
        task = load_task(task_dir)
    except TaskError as e:
        return [Failure(1, CHECKS[1], str(e))]
    fails = []

    def fail(n, reason):
        fails.append(Failure(n, CHECKS[n], reason))
    if not (task.path / "solution" / "solve.sh").is_file():
        fail(1, f"{task.path / 'solution' / 'solve.sh'}: missing (the checks need an oracle)")
    if not (task.path / "environment").is_dir():
        fail(1, f"{task.path / 'environment'}: missing (may be empty, must exist)")
    if sandbox == "docker" or sandbox.startswith("harbor:"):
        return _check_docker(task, stage, sandbox.partition(":")[2])
    if task.container.engine_only:
        fail(1, f"needs --sandbox docker: {task.container.engine_only}")
    if sandbox == "bwrap" and (why := taskenv.clash(task)):
        fail(1, why)
    if sandbox == "dir" and task.container.dockerfile:
        fail(1, f"{task.container.dockerfile}: a container task is checked under --sandbox bwrap only (its scripts use "
                f"{task.container.workdir}, /tests, /logs/verifier, /solution: mounts, which --sandbox dir "
                "cannot make)")
    if fails:
        return fails
    env = task.path / "environment"
    for p in env.rglob("*"):
        if p.is_symlink() and not p.resolve().is_relative_to(env.resolve()):
            fail(2, f"{p}: symlink out of the environment (to {os.readlink(p)})")
    if fails:
        return fails
    with tempfile.TemporaryDirectory(prefix="harness-rl-check-") as tmp:
        tmp = Path(tmp)
        stage[0] = 2
        try:
            work = taskenv.materialize(task, tmp / "oracle")
        except OSError as e:
            return [Failure(2, CHECKS[2], f"materialize failed: {e}")]
        env_files = _files(work)
        expected = _expected(task)
        if set(env_files) != expected:
            fail(2, f"work dir differs from what environment/ {'COPYs' if task.container.dockerfile else 'holds'}: "
                    f"{sorted(set(env_files) ^ expected)[:5]}")
        stage[0] = 3
        rc, out = taskenv.run_oracle(task, work, sandbox=sandbox)
        after = _files(work)
        if rc != 0:
            fail(3, f"solve.sh {'timed out' if rc is None else f'exited {rc}'}: {out[-300:]}")
        def grade(w):
            return taskenv.verify(task, w, sandbox=sandbox)
        first, second = grade(work), grade(work)
        if first.score is None or abs(first.score - 1.0) > 1e-9:
            fail(3, f"oracle scored {first.score}: {first.reason} {first.output[-300:]}".strip())
        if (first.score, first.rewards) != (second.score, second.rewards):
            fail(5, f"oracle work dir graded {first.score} then {second.score}")
        stage[0] = 4
        noop = taskenv.materialize(task, tmp / "noop")
        n1, n2 = grade(noop), grade(noop)
        if n1.score != 0.0:
            fail(4, f"no-op scored {n1.score}: {n1.reason}")
        if (n1.score, n1.rewards) != (n2.score, n2.rewards) and not any(f.check == 5 for f in fails):
            fail(5, f"no-op work dir graded {n1.score} then {n2.score}")
        gone = taskenv.materialize(task, tmp / "deleted")
        for p in gone.iterdir():
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        d = grade(gone)
        if d.score != 0.0:
            fail(4, f"deleting the work dir's files scored {d.score}: {d.reason}")
        stage[0] = 6
        for problem in _leaks(task, env_files, after):
            fail(6, problem)
    return fails


def _check_docker(task, stage, harbor="") -> list[Failure]:
    """Under docker: its image builds (check 2), the oracle scores 1 (3) in two fresh containers alike (5), and
    an agent that does nothing 0 (4). harbor: the type of Harbor's environment to run both in instead."""
    fails, d = [], containers.daemon() if harbor in ("", "docker") else None
    stage[0] = 2
    image = d and containers.task_image(task, d, quiet=True)
    stage[0] = 3
    if harbor:
        import asyncio
        oracle, noop, _ = asyncio.run(harborenv.check(task, harbor, docker=d, image=image))
        return [Failure(3, CHECKS[3], f"oracle scored {oracle} in harbor:{harbor}")] * (oracle != 1.0) + \
            [Failure(4, CHECKS[4], f"no-op scored {noop} in harbor:{harbor}")] * (noop != 0.0)
    with tempfile.TemporaryDirectory(prefix="harness-rl-check-") as tmp:
        (rc, first), (_, second) = containers.solve(task, d, tmp), containers.solve(task, d, tmp)
        if rc != 0:
            fails.append(Failure(3, CHECKS[3], f"solve.sh {'timed out' if rc is None else f'exited {rc}'}"))
        if first.score is None or abs(first.score - 1.0) > 1e-9:
            fails.append(Failure(3, CHECKS[3], f"oracle scored {first.score}: {first.reason} {first.output[-300:]}"))
        if (first.score, first.rewards) != (second.score, second.rewards):
            fails.append(Failure(5, CHECKS[5], f"oracle graded {first.score} then {second.score}"))
        stage[0] = 4
        noop = containers.solve(task, d, tmp, run=False)[1]
        if noop.score != 0.0:
            fails.append(Failure(4, CHECKS[4], f"no-op scored {noop.score}: {noop.reason}"))
    return fails


def check_tasks(dirs, workers=None, sandbox="dir") -> dict:
    """check_task over many task dirs in parallel (the work is in subprocesses, so threads suffice)."""
    dirs = [Path(d).resolve() for d in dirs]
    workers = workers or 2 * (os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(dirs, pool.map(lambda d: check_task(d, sandbox), dirs)))


def _print_table(tasks):
    types = sorted({t.type for t in tasks})
    sources = sorted({t.source for t in tasks})
    rows = [["source", *types, "total"]]
    for s in sources + ["total"]:
        counts = [sum(1 for t in tasks if s in (t.source, "total") and t.type == ty) for ty in types]
        rows.append([s, *map(str, counts), str(sum(counts))])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


def main(argv=None):
    ap = argparse.ArgumentParser(description="Harbor-layout tasks: run the six checks, show the holdout split.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="run the six checks on every task under DIR")
    c.add_argument("dir", help="a task folder or a folder of them (e.g. data/)")
    c.add_argument("-j", "--workers", type=int, default=None, help="tasks checked at once (default: 2 x the CPU count)")
    c.add_argument("--sandbox", default="auto", choices=SANDBOXES + tuple(f"harbor:{t}" for t in harborenv.TYPES),
                   help="where oracles and verifiers run (auto: bubblewrap where it works, as in train.py; "
                        "harbor:TYPE: in Harbor's own environment of that type, harborenv.py)")
    s = sub.add_parser("split", help="print the holdout manifest a run records (recipe.py's HOLDOUT table)")
    s.add_argument("dir", help="a folder of tasks, a suite, or several comma-separated (e.g. repo2rl,smoldata)")
    s.add_argument("--seed", type=int, help="the split's seed, as train.py --seed (default: recipe.py's)")
    args = ap.parse_args(argv)
    if args.cmd == "split":     # the numbers are recipe.py's table (imported here: it brings torch, via grpo)
        import recipe
        seed = recipe.SHARED["seed"] if args.seed is None else args.seed
        return print(json.dumps(split_manifest(load_tasks(args.dir), recipe.HOLDOUT, seed), indent=1))      # exit status 0
    t0 = time.time()
    dirs = [d for r in resolve_suites(args.dir) for d in task_dirs(r)]
    sandbox, warning = (args.sandbox, "") if args.sandbox.startswith("harbor:") else \
        resolve_sandbox(args.sandbox)                    # a container task under dir: its check 1 says why
    if warning:
        print(warning.replace("rollouts run", "oracles and verifiers run"), file=sys.stderr)
    report = check_tasks(dirs, args.workers, sandbox)
    loaded = []
    for d in report:
        try:
            loaded.append(load_task(d))
        except TaskError:
            pass
    _print_table(loaded)
    bad = {d: f for d, f in report.items() if f}
    for d, fails in bad.items():
        for f in fails:
            print(f"FAIL {d}  check {f.check} ({f.name}): {f.reason}")
    print(f"{len(report)} tasks, {len(bad)} failing, {sum(map(len, bad.values()))} failures, "
          f"{time.time() - t0:.1f}s")
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TaskError as e:          # an unknown suite or folder: one line naming it, no traceback
        sys.exit(f"tasks.py: {e}")
