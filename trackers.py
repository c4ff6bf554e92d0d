"""Each step's metrics line, copied to the experiment trackers people already use: `--report-to trackio`
(local, offline: a SQLite file under $TRACKIO_DIR; `trackio show` opens it) and/or `wandb`.

A tracker is imported only when asked for (not installed: a one-line error at start) and gets a flat, numbers-only
copy per trainer prefix (`mini/reward`); metrics.jsonl stays the source of truth. One that fails later is reported
once and dropped, never stopping training. A resumed run logs to the same tracker run (named by the run folder).

Left out: media, tables, rollouts (the dashboard and the ATIF files have them), other trackers (add one to
START: a function (run_name, config, run_dir) -> (log(metrics, step, prefix), finish())).
"""
from __future__ import annotations

import importlib
import math
import re
import sys

PROJECT = "harness-rl"


def _trackio(mod, name, config, run_dir):
    mod.init(project=PROJECT, name=name, config=config, resume="allow")
    return lambda m, step, prefix: mod.log(m, step=step), mod.finish


def _wandb(mod, name, config, run_dir):
    run = mod.init(project=PROJECT, name=name, id=re.sub(r"[^\w.-]", "-", name),    # wandb ids: none of / \ # ? % :
                   config=config, dir=str(run_dir), resume="allow")
    seen = set()

    def log(m, step, prefix):
        if prefix not in seen:       # each trainer's own step axis: their steps interleave
            run.define_metric(f"{prefix}/step")
            run.define_metric(f"{prefix}/*", step_metric=f"{prefix}/step")
            seen.add(prefix)
        run.log({**m, f"{prefix}/step": step})
    return log, run.finish


START = {"trackio": _trackio, "wandb": _wandb}


def flat(m, prefix):
    """{'reward': 0.5, 'ungraded_by': {'timeout': 2}} -> {'p/reward': 0.5, 'p/ungraded_by/timeout': 2}, finite
    numbers only (None, strings and NaN left out: trackers chart numbers)."""
    out = {}
    for k, v in m.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}/{k}"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[f"{prefix}/{k}"] = v
    return out


class Reporter:
    """The run's trackers: `log(m)` per metrics line (train.py calls it after each step), `close()` at exit."""

    def __init__(self, kinds, name, config, run_dir):
        self.live = {}
        for kind in [k.strip() for k in (kinds or "").split(",") if k.strip()]:
            if kind not in START:
                raise ValueError(f"--report-to {kind}: not a tracker this knows ({', '.join(START)})")
            try:
                mod = importlib.import_module(kind)
            except ImportError:
                raise ValueError(f"--report-to {kind}: {kind} is not installed (pip install {kind}); "
                                 "runs/<run>/metrics.jsonl has every step without it") from None
            self.live[kind] = START[kind](mod, name, config, run_dir)

    def log(self, m):
        for kind, (log, _) in list(self.live.items()):
            try:
                log(flat({k: v for k, v in m.items() if k not in ("trainer", "step")}, m["trainer"]), m["step"],
                    m["trainer"])
            except Exception as e:       # a tracker's outage is not the run's: say so once, go on without it
                print(f"--report-to {kind}: {type(e).__name__}: {e}; not reporting to it any more", file=sys.stderr)
                del self.live[kind]

    def close(self):
        for kind, (_, finish) in self.live.items():
            try:
                finish()
            except Exception as e:
                print(f"--report-to {kind}: finish failed: {e}", file=sys.stderr)
        self.live = {}
