"""A run's folder on disk (its layout: README.md, "The run folder"): checkpoint/state.pt (the last two kept), one
metrics.jsonl line per trainer step (its columns: metrics.py), and the end-of-run summary.

Left out: what goes into a checkpoint and when (train.py), remote storage, pruning old adapters.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import torch

import checkpoint
import metrics
from metrics import mean_or_none


CHECKPOINTS = ("checkpoint", "checkpoint.tmp", "checkpoint.prev")    # where a resume looks, newest first


def write_checkpoint(run_dir, state):
    """state as run_dir/checkpoint/state.pt, the one before kept (in case this one proves unreadable); renamed into
    place only once written, so a kill at any point leaves a whole one among CHECKPOINTS."""
    final, tmp, prev = (Path(run_dir) / d for d in CHECKPOINTS)
    with checkpoint.atomic_dir(final, replace=True, keep=prev, tmp=tmp) as d:
        torch.save(state, d / "state.pt")


class ResumeError(Exception):
    """--resume cannot go on (no usable checkpoint, a finished or clashing run): the message says why."""


def same_base(trained, build, what):
    """The base to go on with adapters that trained on `trained` (a checkpoint's "base"; None: not recorded): that
    folder while it is there, else build() (the base a start makes now) - refused when its name differs, as it is
    then another model."""
    if trained and (Path(trained) / "config.json").is_file():
        return Path(trained)
    path = Path(build())
    if trained and Path(trained).name != path.name:
        raise ResumeError(f"{what}: the adapters trained on {trained}, which is gone, and the base would now be "
                          f"{path} (its checkpoint, revision or warm start changed since) - another model; put that "
                          "folder back, or train anew")
    return path


def write_split(run_dir, split):
    """split.json, written whole (a kill leaves the old file or the new, never a part)."""
    f = Path(run_dir) / "split.json"
    tmp = f.with_name("split.json.tmp")
    tmp.write_text(json.dumps(split, indent=1))
    os.replace(tmp, f)


def record_base(run_dir, base):
    """The base the run's adapters train on, beside its split in split.json: eval.py scores them on it (whatever a
    start would build now)."""
    split = json.loads((Path(run_dir) / "split.json").read_text())
    if split.get("base") != str(base):
        write_split(run_dir, {**split, "base": str(base)})


class RunInUse(ResumeError):
    """Another live process holds the run dir (its lock): nothing of it may be touched."""


def _dying(pid):
    """Whether the process that wrote the lock is gone or a zombie (its leader thread ended, others may not yet)."""
    try:
        return " Z " in Path(f"/proc/{int(pid)}/stat").read_text().rsplit(")", 1)[1][:3] + " "
    except (OSError, ValueError):
        return True


def lock(run_dir):
    """Hold run_dir until this process exits, kill -9 included (a POSIX lock on run_dir/.lock: this process's
    own, so a child forked but not yet exec'd - or stuck there - never keeps it). Raises ResumeError if another
    process holds it: two writers would interleave metrics lines and checkpoints."""
    try:
        f = open(Path(run_dir) / ".lock", "a+")
    except OSError as e:         # a read-only run dir
        raise ResumeError(f"{run_dir}: cannot write its lock file ({e.strerror}): a run dir must be writable") from None
    deadline = time.monotonic() + 15
    while True:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            f.seek(0)
            pid = f.read().strip()
            if _dying(pid) and time.monotonic() < deadline:
                time.sleep(0.1)     # killed -9 a moment ago: its threads still hold the lock while they end
                continue
            raise RunInUse(f"{run_dir} is in use by another train.py (pid {pid or '?'}): stop it first, or use "
                           "another --run") from None
    f.truncate(0)
    f.write(str(os.getpid()))
    f.flush()
    return f


def read_checkpoint(run_dir, names):
    """(state, its dir): the newest checkpoint of CHECKPOINTS that loads and holds every trainer of the run.
    Raises ResumeError saying why each one failed; nothing is changed on disk."""
    why = []
    for d in CHECKPOINTS:
        f = run_dir / d / "state.pt"
        if not f.exists():
            continue
        try:
            st = torch.load(f, weights_only=False)
            if missing := [n for n in names if n not in st["trainers"]]:
                raise ValueError(f"no state for trainer {', '.join(missing)}")
            return st, d
        except Exception as e:          # truncated, empty, not a checkpoint: try the one before
            why.append(f"{f}: {type(e).__name__}: {str(e)[:200]}")
    raise ResumeError(f"--resume {run_dir}: no usable checkpoint; nothing was changed. " +
                      ("; ".join(why) if why else f"none of {', '.join(CHECKPOINTS)} has a state.pt"))


def remove_if_unstarted(run_dir):
    """Remove a new run's folder that holds only what a start writes (its config, split and lock): a run refused
    before its first step. Anything else there (a server log, a metrics line) keeps it."""
    run_dir = Path(run_dir)
    started = {"config.json", "split.json", "split.json.tmp", ".lock"}
    if run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= started:
        for p in run_dir.iterdir():
            p.unlink()
        run_dir.rmdir()


def trim_metrics(path, last):
    """After a kill: keep only complete lines up to each harness's checkpointed step (last: name -> step).
    Returns how many lines were dropped."""
    if not path.exists():
        return 0
    lines = path.read_text().splitlines()
    keep = []
    for line in lines:
        try:
            m = read_metric(line)
        except json.JSONDecodeError:
            continue
        if m.get("step", 0) <= last.get(m.get("trainer"), 0):
            keep.append(line)
    path.write_text("".join(x + "\n" for x in keep))
    return len(lines) - len(keep)


def read_metric(line):
    return metrics.renamed(json.loads(line))


def append_metrics(run_dir, m):
    with open(Path(run_dir) / "metrics.jsonl", "a") as f:
        f.write(json.dumps(m) + "\n")


def summary(run_dir, trainers, seconds):
    """Print each trainer's end-of-run line (trainers: name -> (steps, its last adapter's folder)): first vs last
    quarter of its steps, as in docs/main-job.md, "The summary"."""
    lines = [read_metric(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()] \
        if (run_dir / "metrics.jsonl").exists() else []
    print(f"\nrun {run_dir} ({seconds / 60:.1f} min)")
    for name, (steps, adapter) in trainers.items():
        ms = [m for m in lines if m["trainer"] == name]
        rs = [m["reward"] for m in ms if m["reward"] is not None]
        k = max(1, len(rs) // 4)
        first, last = (sum(rs[:k]) / k, sum(rs[-k:]) / k) if rs else (0.0, 0.0)
        lost = sum(m.get("ungraded_by", {}).get("server", 0) for m in ms)
        cut = mean_or_none([m.get("clip_frac") for m in ms if m["step"] >= 2])
        ps = [m["pass_rate"] for m in ms if m["pass_rate"] is not None]
        ts = [m["tool_calls"] for m in ms if m["tool_calls"] is not None]
        solved = [m.get("tool_calls_solved") for m in ms[-k:]]
        print(f"  {name}: {steps} steps | reward first quarter {first:.3f} -> last quarter {last:.3f}"
              f"{f' ({last / first:.1f}x)' if first > 0 else ''} | pass {mean_or_none(ps[:k]) or 0:.0%} -> "
              f"{mean_or_none(ps[-k:]) or 0:.0%} | tool calls {mean_or_none(ts[:k]) or 0:.2f} -> "
              f"{mean_or_none(ts[-k:]) or 0:.2f} (per solved rollout {_f(mean_or_none(solved), '{:.2f}')}) "
              f"| ungraded {sum(m['ungraded'] for m in ms)} (server errors {lost}) "
              f"| gradient cut {cut or 0:.2f} of tokens (steps 2+)")
        print(f"    adapter {adapter}")
    print(f"  metrics {run_dir / 'metrics.jsonl'}, rollouts {run_dir / 'rollouts'}, "
          f"checkpoint {run_dir / 'checkpoint'}")


def _f(v, s="{:.3f}"):
    return "-" if v is None else s.format(v)
