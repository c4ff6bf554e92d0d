"""A task's environment, run: its work dir made from environment/, the oracle and the verifier run on it, and the
paths of Harbor's container (WORKDIR, /tests, /logs/verifier, /solution) shown by the sandbox where Harbor puts them.

The host's system stands in for the image, so a Dockerfile is honoured only as far as that is true: FROM, WORKDIR,
COPY of environment/ files into the WORKDIR, ENV, LABEL; anything else makes the task docker's (`engine_only`, the
line named; bubblewrap and dir refuse it at start, containers.py builds its image). Only bubblewrap mounts those
paths (`--sandbox dir` refuses a container task); a task without a Dockerfile keeps its work dir at its own path.
The reward is read as Harbor reads it (reward.json wins over reward.txt); no score in [0, 1], a timeout or a crash
-> score None, "ungraded": the verifier failed, not the agent.

Left out: building images, services and the image's own tools (containers.py), docker-compose sidecars, the
`separate` verifier mode, [environment] cpus (read here, a container's limit there).
"""
from __future__ import annotations

import functools
import json
import math
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import sandbox as SB
from suites import TaskError, cache_root

DOCKER_FILES = {"Dockerfile", "docker-compose.yaml", "docker-compose.yml", ".dockerignore"}
HARBOR_PATHS = {"tests": "/tests", "logs": "/logs/verifier", "solution": "/solution"}
DEFAULT_WORKDIR = "/app"
HONOURED = ("FROM", "WORKDIR", "COPY", "ENV", "LABEL")
OURS = ("HOME", "PATH", "TMPDIR", "WORKDIR", "TESTS_DIR", "LOGS_DIR", "SOLUTION_DIR", "AGENT_OUTPUT")  # not a task's
_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Container:
    """What environment/Dockerfile and task.toml say about the container, as far as a sandbox honours it."""
    dockerfile: Path | None = None       # None: not a container task (the work dir keeps its own path)
    workdir: str | None = None           # where the work dir is mounted
    copies: list = field(default_factory=list)     # (source under environment/, destination relative to workdir)
    env: dict = field(default_factory=dict)        # ENV + [environment] env
    memory_mb: int | None = None                   # [environment] memory_mb: its sandbox's memory (sandbox.Limits)
    cpus: float | None = None                      # [environment] cpus: its container's CPUs (--sandbox docker)
    storage_mb: int | None = None                  # [environment] storage_mb: its files' bound (sandbox.disk_mb)
    engine_only: str = ""                          # why only --sandbox docker runs it (a RUN line, ...), or ""


@dataclass
class Result:
    score: float | None          # in [0, 1]; None = ungraded (the verifier itself failed)
    reason: str
    rewards: dict = field(default_factory=dict)  # reward.json's named floats, or {"reward": x}
    returncode: int | None = None
    seconds: float = 0.0
    output: str = ""             # tail of the script's stdout + stderr


# ----------------------------------------------------------------------------- the Dockerfile

def _lines(text):
    """(first line number, instruction line) with continuations joined and comments dropped."""
    out, buf, start = [], "", None
    for i, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not buf and (not s or s.startswith("#")):
            continue
        if buf and s.startswith("#"):
            continue
        start = start or i
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        out.append((start, buf + s))
        buf, start = "", None
    if buf:
        out.append((start, buf.strip()))
    return out


def _words(args):
    """An instruction's arguments: the JSON array form or whitespace-separated words."""
    if args.startswith("["):
        try:
            words = json.loads(args)
        except json.JSONDecodeError:
            words = None
        if isinstance(words, list) and all(isinstance(w, str) for w in words):
            return words
    return args.split()


def _inside(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def container(task_dir, cfg) -> Container:
    """environment/Dockerfile and task.toml's [environment] -> Container. Raises TaskError naming the file and line."""
    task_dir = Path(task_dir)
    env_cfg, ctx = cfg.get("environment") or {}, task_dir / "environment"
    df = ctx / "Dockerfile"
    box = Container()
    box.env = resolve_env(env_cfg.get("env") or {}, f"{task_dir / 'task.toml'}: [environment] env")
    for key in ("memory_mb", "storage_mb"):
        mb = env_cfg.get(key)
        if mb is not None and (type(mb) is not int or mb < 16):
            raise TaskError(f"{task_dir / 'task.toml'}: [environment] {key} must be a whole number of MB >= 16, "
                            f"got {mb!r}")
        setattr(box, key, mb)
    cpus = env_cfg.get("cpus")
    if cpus is not None and (type(cpus) not in (int, float) or not 0 < cpus <= 1024):
        raise TaskError(f"{task_dir / 'task.toml'}: [environment] cpus must be a number in (0, 1024], got {cpus!r}")
    box.cpus = cpus and float(cpus)
    if not df.is_file():
        if env_cfg.get("workdir"):
            raise TaskError(f"{task_dir / 'task.toml'}: [environment] workdir without environment/Dockerfile: "
                            "a task with no container keeps its work dir at its own path")
        return box
    box.dockerfile = df
    try:
        text = df.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(f"{df}: unreadable: {e}") from None
    try:
        return _honoured(box, df, text, env_cfg, task_dir, ctx)
    except TaskError as e:      # bubblewrap cannot run it; docker builds the image itself (containers.py)
        wd = env_cfg.get("workdir")
        if wd is not None and (not isinstance(wd, str) or _bad_workdir(posixpath.normpath(wd) if wd else "")):
            raise TaskError(f"{task_dir / 'task.toml'}: [environment] workdir {wd!r}: an absolute dir other than "
                            "/, /tmp and the system's") from None
        box.workdir, box.engine_only = wd and posixpath.normpath(wd), str(e)
        return box


def _honoured(box, df, text, env_cfg, task_dir, ctx):
    """The Dockerfile as far as bubblewrap honours it -> box; TaskError naming the first line it cannot."""
    wd, copies, env, seen_from = None, [], {}, False
    for n, line in _lines(text):
        op, args = (line.split(None, 1) + [""])[:2]
        op, args, where = op.upper(), args.strip(), f"{df} line {n}"
        if op not in HONOURED:
            raise TaskError(f"{where}: {line[:80]!r} needs --sandbox docker; bubblewrap honours only "
                            f"{', '.join(HONOURED)} (COPY of environment/ files into the WORKDIR)")
        if op == "FROM" and seen_from:
            raise TaskError(f"{where}: {line[:80]!r}: a multi-stage build needs --sandbox docker")
        seen_from = seen_from or op == "FROM"
        if op == "WORKDIR":
            if "$" in args or not args:
                raise TaskError(f"{where}: WORKDIR {args!r}: variables are not expanded here")
            wd = posixpath.normpath(posixpath.join(wd or "/", args))
        elif op == "ENV":
            env |= _env_words(args, where)
        elif op == "COPY":
            words = _words(args)
            flags = [w for w in words if w.startswith("--")]
            bad = [f for f in flags if not f.startswith(("--chown=", "--chmod=", "--link"))]
            if bad or len(words) - len(flags) < 2:
                raise TaskError(f"{where}: COPY {args[:60]!r}: " + (f"{bad[0].split('=')[0]} needs --sandbox docker"
                                                                     if bad else "needs a source and a destination"))
            *srcs, dst = [w for w in words if not w.startswith("--")]
            dst_abs = posixpath.normpath(posixpath.join(wd or "/", dst))
            into = dst.endswith("/") or len(srcs) > 1 or dst_abs == (wd or "/")     # a dir that is there: into it
            for s in srcs:
                found = sorted(ctx.glob(s.lstrip("/"))) if any(c in s for c in "*?[") else [ctx / s.lstrip("/")]
                found = [p for p in found if p.exists() and p.resolve().is_relative_to(ctx.resolve())
                         and p.name not in DOCKER_FILES]
                if not found:
                    raise TaskError(f"{where}: COPY source {s!r} is not a file in environment/")
                for p in found:        # a dir's contents go into dst; a file is dst, or goes into it
                    into_dir = p.is_file() and (into or len(found) > 1)
                    copies.append((p, posixpath.join(dst_abs, p.name) if into_dir else dst_abs, n))
    if "workdir" in env_cfg and not (isinstance(env_cfg["workdir"], str) and env_cfg["workdir"]):
        raise TaskError(f"{task_dir / 'task.toml'}: [environment] workdir must be a path, got {env_cfg['workdir']!r}")
    box.workdir = posixpath.normpath(env_cfg.get("workdir") or wd or DEFAULT_WORKDIR)
    if why := _bad_workdir(box.workdir):
        raise TaskError(f"{df}: WORKDIR {box.workdir[:200]!r}: {why}")
    for p, dest, n in copies:
        if not _inside(dest, box.workdir):
            raise TaskError(f"{df} line {n}: COPY to {dest} lies outside the WORKDIR {box.workdir}: bubblewrap "
                            "mounts only the work dir (--sandbox docker puts it in the image)")
        box.copies.append((p, posixpath.relpath(dest, box.workdir)))
    box.env = env | box.env
    return box


def _bad_workdir(wd):
    if not wd.startswith("/") or wd in ("/", "/tmp") or len(wd) > 1024 or not wd.isprintable():
        return "must be an absolute dir other than / and /tmp, printable, at most 1024 characters"
    for d in (*SB.SYSTEM_DIRS, "/proc", "/dev", "/sys", "/logs", *HARBOR_PATHS.values()):
        if _inside(wd, d):
            return f"lies in {d}, which the sandbox shows from the host (or Harbor keeps for itself)"
    return None


def _env_words(args, where):
    try:
        words = shlex.split(args)
    except ValueError as e:
        raise TaskError(f"{where}: ENV {args[:60]!r}: {e}") from None
    pairs = dict(w.split("=", 1) for w in words) if words and all("=" in w for w in words) else \
        {words[0]: " ".join(words[1:])} if len(words) >= 2 else None
    if not pairs or any("$" in v or "\0" in v for v in pairs.values()) or not all(map(_NAME.fullmatch, pairs)):
        raise TaskError(f"{where}: ENV {args[:60]!r}: expected NAME=value pairs without variables")
    return pairs


def resolve_env(table, where):
    """Harbor's env tables: literal strings or ${VAR} / ${VAR:-default}, read from our environment."""
    if not isinstance(table, dict) or not all(isinstance(v, (str, int, float, bool)) for v in table.values()):
        raise TaskError(f"{where} must be a table of strings, got {table!r}")
    out = {}
    for k, v in table.items():
        if not _NAME.fullmatch(str(k)) or "\0" in str(v):
            raise TaskError(f"{where}: {str(k)[:60]!r} is not a variable name, or its value holds a NUL")
        m = _TEMPLATE.fullmatch(str(v))
        if m and m.group(1) not in os.environ and m.group(2) is None:
            raise TaskError(f"{where}: {k} = {v!r}: {m.group(1)} is not set in this environment")
        out[str(k)] = (os.environ.get(m.group(1), m.group(2)) if m else str(v))
    return out


def clash(task, shown=()) -> str | None:
    """Why a container task's WORKDIR cannot be mounted here (one line), or None: it would hide, or lie inside, what
    every sandbox shows (this Python, node, the project, the cache with the harness installs, `shown`)."""
    wd = task.container.workdir
    for p in [*SB.tool_paths(shown), str(Path(__file__).resolve().parent), str(cache_root())] if wd else ():
        if _inside(str(p), wd) or _inside(wd, str(p)):
            return (f"{task.container.dockerfile}: WORKDIR {wd} {'holds' if _inside(str(p), wd) else 'lies in'} {p}, "
                    "which the sandbox shows from the host: pick another WORKDIR (or another place for it)")
    return None


def resolve_sandbox(mode, tasks, shown=()):
    """sandbox.resolve_sandbox, refusing `dir` (asked for, or the fallback) when a task is a container task, bwrap
    for a container task whose WORKDIR clashes with what the sandbox shows (`shown`: a harness install), and both
    for a task only a container engine builds (a RUN line: --sandbox docker, containers.py)."""
    sandbox, warning = SB.resolve_sandbox(mode)
    engine = [t for t in tasks if t.container.engine_only]
    if engine and sandbox != "docker" and not sandbox.startswith("harbor:"):
        raise TaskError(f"{len(engine)} task(s) need --sandbox docker (their images are built by a container engine): "
                        f"{engine[0].container.engine_only}")
    boxed, offline = [t.name for t in tasks if t.container.dockerfile], sum(map(offline_task, tasks))
    if sandbox == "dir" and offline:
        warning = "\n".join(filter(None, [warning, f"sandbox dir: {offline} no-network task(s) get the host's network "
                                                   "(only the guard's hosts rule; --sandbox bwrap gives each agent "
                                                   "its own)"]))
    for t in tasks if sandbox == "bwrap" else ():
        if why := clash(t, shown):
            raise TaskError(why)
    if sandbox == "dir" and boxed:
        raise TaskError(f"{len(boxed)} task(s) ({', '.join(boxed[:3])}{', ...' if len(boxed) > 3 else ''}) come "
                        f"with environment/Dockerfile: their scripts use the container's paths (the WORKDIR, /tests, "
                        f"/logs/verifier, /solution), which only --sandbox bwrap mounts; --sandbox dir mounts nothing"
                        + (f" ({warning.split(';')[0]})" if warning else ""))
    return sandbox, warning


def refuse_dir(task, sandbox):
    if sandbox == "dir" and task.container.dockerfile:
        raise TaskError(f"{task.container.dockerfile}: a container task runs under --sandbox bwrap only (its WORKDIR "
                        f"{task.container.workdir}, /tests, /logs/verifier and /solution are mounts)")
    if task.container.engine_only and sandbox != "docker":
        raise TaskError(f"needs --sandbox docker: {task.container.engine_only}")
    if sandbox not in ("bwrap", "dir"):
        raise ValueError(f"sandbox must be 'bwrap' or 'dir' here (resolve 'auto' first; docker: containers.py), "
                         f"got {sandbox!r}")


def workdir(task, work, boxed=True) -> str:
    """Where the agent sees its work dir: the container's WORKDIR; in a sandbox, DEFAULT_WORKDIR (the same path in
    every rollout, so every rollout of a harness gets the same system prompt: one shared prefix at the server and in
    training) unless the host shows something there; else its own path."""
    return task.container.workdir or (DEFAULT_WORKDIR if boxed and not _host_shows(DEFAULT_WORKDIR) else
                                      str(Path(work).resolve()))


@functools.cache
def _host_shows(path) -> bool:
    """Whether a sandbox shows something from the host at or under `path` (this Python, node, the project, the
    cache with the harness installs), or `path` lies in one of them: it cannot be a mount point then."""
    return any(_inside(str(p), path) or _inside(path, str(p)) for p in
               [*SB.tool_paths(), str(Path(__file__).resolve().parent), str(cache_root())])


def network_mode(task) -> str:
    """The agent phase's network: [agent] network_mode, else [environment]'s, else "no-network" where allow_internet
    is false, else "public"."""
    env, agent = task.config.get("environment") or {}, task.config.get("agent") or {}
    return agent.get("network_mode") or env.get("network_mode") or \
        ("no-network" if env.get("allow_internet") is False else "public")


def offline_task(task) -> bool:
    """Whether the agent phase is "no-network": its own network namespace. "public" (the default) and "allowlist"
    keep the host's network."""
    return network_mode(task) == "no-network"


def task_env(task, extra=None):
    """The task's environment variables for a script or the agent (ENV, [environment] env, then `extra`), for
    bwrap_args(setenv=): inside the sandbox only, never bwrap's own (it runs as root)."""
    return {k: v for k, v in (task.container.env | (extra or {})).items() if k not in OURS}


# ----------------------------------------------------------------------------- running

def materialize(task, work) -> Path:
    """A fresh (absent or empty) agent work dir: environment/'s files (a task without a Dockerfile; Docker's own
    files left out) or what the Dockerfile COPYs into its WORKDIR."""
    work = Path(work)
    if work.exists() and any(work.iterdir()):
        raise FileExistsError(f"{work}: work dir not empty")
    env = Path(task.path) / "environment"
    work.mkdir(parents=True, exist_ok=True)
    if task.container.dockerfile:
        for src, rel in task.container.copies:
            _place(src, work, rel, skip=env)
    elif env.is_dir():
        shutil.copytree(env, work, symlinks=True, dirs_exist_ok=True,
                        ignore=lambda d, names: [n for n in names if n in DOCKER_FILES and Path(d) == env])
    return work


def _place(src, work, rel, skip):
    """COPY src (a file, or a dir's contents) to work/rel, links copied as links and never written through (we are
    root; an earlier COPY's link could point anywhere). Docker's own files at the top of `skip` are left out."""
    root, entries = work.resolve(), [(src, Path(rel))]
    if src.is_dir() and not src.is_symlink():
        entries = [(Path(d) / n, Path(rel) / Path(d).relative_to(src) / n) for d, dirs, files in os.walk(src)
                   for n in sorted(dirs) + sorted(files) if not (Path(d) == skip and n in DOCKER_FILES)]
        entries.insert(0, (src, Path(rel)))
    for s, r in entries:
        d = root / r
        if d != root and not d.parent.resolve().is_relative_to(root):
            raise TaskError(f"{src}: its COPY to {r} would go through a link out of the work dir")
        d.parent.mkdir(parents=True, exist_ok=True)
        if d.is_symlink() or d.exists() and not (d.is_dir() and s.is_dir() and not s.is_symlink()):
            shutil.rmtree(d) if d.is_dir() and not d.is_symlink() else d.unlink()
        if s.is_symlink():
            os.symlink(os.readlink(s), d)
        elif s.is_dir():
            d.mkdir(exist_ok=True)
        else:
            shutil.copy2(s, d, follow_symlinks=False)


def base_env(home):
    """A small, fixed environment; `python3` is this interpreter (no pyenv shim in between)."""
    return {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home), "TMPDIR": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}


def pristine_python(home):
    """The verifier's Python loads nothing cached or hooked from where the agent wrote: byte code only from a fresh
    folder (a `__pycache__` planted in the work dir is not read: source runs), no user site (a planted
    `usercustomize`/`.pth` under a home). The suites' graders also run `python3 -S` (no `sitecustomize`) and put
    the work dir after the standard library (data/run_tests.py)."""
    return {"PYTHONPYCACHEPREFIX": f"{home}/.pycache", "PYTHONNOUSERSITE": "1"}


def limits(task) -> SB.Limits:
    """A sandbox's bounds for `task`: its [environment] memory_mb where it gives one, else the run's (SB.LIMITS)."""
    return SB.Limits(memory_mb=task.container.memory_mb)


def run_logged(argv, timeout, log_path, cwd=None, env=None, bounds=None):
    """Run in a new process group (inside `bounds`, a sandbox.Limits, closed here); kill the whole group (and,
    under bwrap, the sandbox) on timeout and any leftovers after exit, and wait until they are gone."""
    t0 = time.monotonic()
    argv = bounds.argv(argv) if bounds else argv
    with open(log_path, "wb") as log:
        try:
            p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, **SB.spawn_kw(argv))
        finally:
            SB.close_fds(argv)
        SB.watch(p.pid)
        try:
            rc, timed_out = p.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            rc, timed_out = None, True
        finally:
            SB.wait_dead(SB.kill(p.pid))
            p.wait()
            bounds and bounds.close()
    try:          # the sandboxed script could have swapped its log for a link or a FIFO
        out = SB.read_untrusted(log_path, 4000, tail=True).decode(errors="replace")
    except (OSError, ValueError) as e:
        out = f"(output unreadable: {type(e).__name__})"
    return rc, timed_out, out, time.monotonic() - t0


def run_oracle(task, work, timeout=None, sandbox="dir"):
    """Run solution/solve.sh in the work dir, a copy of the solution at SOLUTION_DIR -> (rc, output). Under bwrap it
    sees only the work dir, its home, /solution and the tools: a bad oracle cannot damage the suite."""
    refuse_dir(task, sandbox)
    with tempfile.TemporaryDirectory(prefix="harness-rl-oracle-") as tmp:
        sol, home = Path(tmp) / "solution", Path(tmp) / "home"
        shutil.copytree(Path(task.path) / "solution", sol)
        home.mkdir()
        work, wd = Path(work).resolve(), workdir(task, work, sandbox == "bwrap")
        at = HARBOR_PATHS["solution"] if sandbox == "bwrap" else str(sol)
        extra = resolve_env(task.config.get("solution", {}).get("env", {}), f"{task.path}/task.toml: [solution] env")
        env, theirs = base_env(home) | {"SOLUTION_DIR": at, "WORKDIR": wd}, task_env(task, extra)
        argv = ["bash", f"{at}/solve.sh"]
        if sandbox == "bwrap":
            SB.own(work, home)
            argv = SB.bwrap_args([home], SB.tool_paths(), SB.private_paths(Path(task.path).resolve().parent),
                                 chdir=wd, network=False, mounts=[(work, wd, True), (sol, at, False)],
                                 setenv=theirs) + argv
        else:
            env = theirs | env
        rc, timed_out, out, _ = run_logged(argv, timeout or task.agent_timeout, Path(tmp) / "solve.log", work, env)
    return (None if timed_out else rc), out


def read_reward(logs_dir):
    """(score, rewards, reason) from reward.json (wins) or reward.txt; score None if absent or invalid."""
    logs_dir = Path(logs_dir)
    js, txt = logs_dir / "reward.json", logs_dir / "reward.txt"
    # written by the task's script, which runs the agent's code: read as untrusted (no link, no FIFO, 64 KiB),
    # and its content never quoted back at length
    read = lambda f: SB.read_untrusted(f).decode()      # noqa: E731
    try:
        if os.path.lexists(js):
            text = read(js)
            data = json.loads(text)
            if isinstance(data, (int, float)) and not isinstance(data, bool):
                data = {"reward": data}
            if not isinstance(data, dict) or not data or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in data.values()):
                return None, {}, f"reward.json is not a dict of named floats: {text[:80]!r}"
            rewards = {k: float(v) for k, v in data.items()}
            if not all(map(math.isfinite, rewards.values())):
                return None, {}, f"reward.json has a value that is not a finite number: {text[:80]!r}"
            score, how = (rewards["reward"], "reward") if "reward" in rewards else \
                (sum(rewards.values()) / len(rewards), "mean")
            src = f"reward.json ({how})"
        elif os.path.lexists(txt):
            score, src = float(read(txt).strip()[:64]), "reward.txt"
            rewards = {"reward": score}
        else:
            return None, {}, "the verifier wrote no reward file"
    except (OSError, ValueError, UnicodeDecodeError, OverflowError) as e:
        return None, {}, f"unreadable reward file: {type(e).__name__}: {str(e)[:80]}"
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        return None, rewards, f"{src}: score {score} outside [0, 1]"
    return score, rewards, f"{src}: {score:g}"


def verify(task, work, timeout=None, logs_dir=None, agent_output=None, sandbox="dir", hide=()) -> Result:
    """Grade an agent's work dir: copy tests/ in now, run tests/test.sh, read the reward. Under bwrap test.sh sees
    only the work dir, the logs dir, its home, /tests, the agent's output and the tools, with no network: the tests
    import the agent's code, which must not reach the suite, other rollouts (`hide`) or the machine, nor outlive it."""
    refuse_dir(task, sandbox)
    work = Path(work).resolve()
    with tempfile.TemporaryDirectory(prefix="harness-rl-verify-") as tmp:
        tmp = Path(tmp)
        tests, logs = tmp / "tests", Path(logs_dir).resolve() if logs_dir else tmp / "logs"
        shutil.copytree(Path(task.path) / "tests", tests)
        logs.mkdir(parents=True, exist_ok=True)
        for stale in ("reward.txt", "reward.json"):
            (logs / stale).unlink(missing_ok=True)
        (tmp / "agent_output.txt").write_text(agent_output or "")
        (tmp / "home").mkdir()
        boxed = sandbox == "bwrap"
        at = {"tests": str(tests), "logs": str(logs)} if not boxed else HARBOR_PATHS
        extra = resolve_env(task.config.get("verifier", {}).get("env", {}), f"{task.path}/task.toml: [verifier] env")
        wd = workdir(task, work, boxed)
        env, theirs = base_env(tmp / "home") | {"WORKDIR": wd, "TESTS_DIR": at["tests"], "LOGS_DIR": at["logs"],
                                                "AGENT_OUTPUT": str(tmp / "agent_output.txt"),
                                                **pristine_python(tmp / "home")}, task_env(task, extra)
        work.mkdir(parents=True, exist_ok=True)     # an agent that removed its work dir is graded on nothing
        t = timeout or task.verifier_timeout
        argv = ["bash", f"{at['tests']}/test.sh"]
        if boxed:
            SB.own(work, logs, tmp / "home")
            argv = SB.bwrap_args([tmp / "home"], SB.tool_paths([tmp / "agent_output.txt"]),
                                 SB.private_paths(Path(task.path).resolve().parent, *hide), chdir=wd, network=False,
                                 mounts=[(work, wd, True), (tests, at["tests"], False), (logs, at["logs"], True)],
                                 setenv=theirs) + argv
        else:
            env = theirs | env
        rc, timed_out, out, secs = run_logged(argv, t, logs / "test-stdout.txt", work, env, limits(task))
        if timed_out:
            return Result(None, f"verifier timed out after {t:g}s", {}, None, secs, out)
        score, rewards, reason = read_reward(logs)
        if score is None:
            reason += f" (exit code {rc})"
        return Result(score, reason, rewards, rc, secs, out)
