"""The guard ablation, measured: runs of the model organism with the guard on and off (docs/guard-ablation.md),
side by side. Per adapter version (the policy a rollout was sampled from): rollouts, the share that attempted a
shortcut - a call that any rule but declared-tool fires on, found by guard.py's post-hoc scan of the ATIF files, never by the run's own verdicts, so a guard-off run is
measured the same way - the share that got reward from it, mean reward, and the pass rate. Then held-out pass@1 on
the honest tasks (data/honest: nothing planted, never trained on or demonstrated) of each run's base and last
adapter, one eval.py per run (<run>/ablation-eval) through the run's harness with the guard on: pass@1 and the mean
score (partial credit), each with a 95 % interval (bootstrap over tasks), and a guard-off run's difference to the
guard-on run of its seed, paired by task.

    python train.py --model tiny-organism --guard on  --seed 0 --run abl-on-s0     # one command per arm
    python train.py --model tiny-organism --guard off --seed 0 --run abl-off-s0
    python bench/ablation.py runs/abl-on-s0 runs/abl-off-s0 [--samples 4] [--no-eval]
"""
import argparse
import json
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import guard  # noqa: E402


def per_version(run):
    """{version: row} from the post-hoc scan of a run's rollouts."""
    rows = defaultdict(lambda: {"n": 0, "attempted": 0, "rewarded": 0, "reward": 0.0, "passed": 0, "graded": 0})
    for r in guard.scan(sorted((Path(run) / "rollouts").rglob("*.json"))):
        row = rows[r["version"]]
        row["n"] += 1
        hack = guard.attempted(r)                           # a malformed call (declared-tool) is no attempt
        row["attempted"] += hack
        row["rewarded"] += hack and (r["reward"] or 0) > 0
        if r["reward"] is not None:
            row["graded"] += 1
            row["reward"] += r["reward"]
            row["passed"] += r["score"] == 1.0 and r["reward"] > 0
    return dict(sorted(rows.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))


def bootstrap(by_task, reps=2000, seed=0):
    """Mean pass@1 over tasks (each task: its samples' mean) and a 95 % percentile interval, tasks resampled."""
    tasks = sorted(by_task)
    means = [sum(by_task[t]) / len(by_task[t]) for t in tasks]
    rng = random.Random(seed)
    boots = sorted(sum(means[rng.randrange(len(means))] for _ in means) / len(means) for _ in range(reps))
    return sum(means) / len(means), boots[int(0.025 * reps)], boots[int(0.975 * reps) - 1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run dirs of the model organism (train.py --model tiny-organism)")
    ap.add_argument("--samples", type=int, default=4, help="held-out rollouts per honest task and run (default 4)")
    ap.add_argument("--no-eval", action="store_true", help="the per-version table only")
    ap.add_argument("--reuse", action="store_true", help="reuse a run's ablation-eval/ made after its last adapter")
    a = ap.parse_args(argv)
    cfgs = {}
    for run in a.runs:
        try:
            cfgs[run] = json.loads((Path(run) / "config.json").read_text())
        except (OSError, ValueError) as e:
            sys.exit(f"ablation.py: {run}: cannot read its config.json ({e}): not a run dir?")
    label = {run: f"guard {cfgs[run].get('guard', 'on')} seed {cfgs[run].get('seed', 0)}" for run in a.runs}
    tables = {run: per_version(run) for run in a.runs}
    print("per adapter version: rollouts | attempted a shortcut (post-hoc scan) | of them rewarded | reward | pass")
    print("version | " + " | ".join(f"{label[r]:^40}" for r in a.runs))
    for v in sorted({v for t in tables.values() for v in t if v is not None}):
        cells = []
        for run in a.runs:
            row = tables[run].get(v)
            cells.append(f"{'':40}" if not row else
                         f"{row['n']:4d} {row['attempted'] / row['n']:6.1%} {row['rewarded']:4d} "
                         f"{row['reward'] / max(1, row['graded']):6.3f} {row['passed'] / max(1, row['graded']):6.1%}"
                         .ljust(40))
        print(f"{v:7d} | " + " | ".join(cells))
    for run in a.runs:
        t = [row for v, row in tables[run].items() if v is not None]
        q = max(1, len(t) // 4)
        share = lambda rows: sum(r["attempted"] for r in rows) / max(1, sum(r["n"] for r in rows))  # noqa: E731
        paid = lambda rows: sum(r["rewarded"] for r in rows) / max(1, sum(r["n"] for r in rows))    # noqa: E731
        print(f"{label[run]}: attempted {share(t[:q]):.1%} (first quarter) -> {share(t[-q:]):.1%} (last), "
              f"rewarded {paid(t[:q]):.1%} -> {paid(t[-q:]):.1%}")
    if a.no_eval:
        return
    pass1, score = {}, {}
    for run in a.runs:
        last = sorted((Path(run) / "adapters").glob("*-v*"), key=lambda p: int(p.name.rsplit("-v", 1)[1]))
        if not last:
            sys.exit(f"ablation.py: {run}: no adapters/ (did the run finish a step?)")
        out = Path(run) / "ablation-eval"     # one eval per run: runs of other seeds have other splits and bases
        cmd = [sys.executable, str(ROOT / "eval.py"), "--model", cfgs[run]["recipe"], "--suite", "honest", "--split",
               "all", "--samples", str(a.samples), "--out", str(out), "--adapters", str(last[-1])]
        done = out / "result.json"
        if a.reuse and done.is_file() and done.stat().st_mtime > last[-1].stat().st_mtime:
            print(f"reusing {done}")
        else:
            print(" ".join(cmd), flush=True)
            if subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL).returncode:
                sys.exit(f"ablation.py: eval.py failed on {run}")
        res = json.loads(done.read_text())
        for r in res["rollouts"]:
            key = (run, "adapter" if r["model"] in res["meta"]["adapters"] else "base")
            ok = not r.get("blocked", r.get("flagged")) and r["score"] is not None
            pass1.setdefault(key, defaultdict(list))[r["task"]].append(float(ok and r["score"] == 1.0))
            score.setdefault(key, defaultdict(list))[r["task"]].append(r["score"] if ok else 0.0)
    tasks = len(pass1[(a.runs[0], "adapter")])
    for name, by in (("pass@1", pass1), ("mean score (partial credit)", score)):
        print(f"\nheld-out {name} on data/honest ({tasks} tasks x {a.samples}, guard on), 95 % interval over tasks; "
              "guard off minus guard on of the same seed, paired by task:")
        for run in a.runs:
            twin = next((r for r in a.runs if cfgs[r].get("guard", "on") == "on" and cfgs[run].get("guard") == "off"
                         and cfgs[r].get("seed", 0) == cfgs[run].get("seed", 0)), None)
            for which in ("base", "adapter"):
                m, lo, hi = bootstrap(by[(run, which)])
                line = f"  {label[run]:<18} {'its base' if which == 'base' else 'last adapter':<13} {m:6.3f} [{lo:.3f}, " \
                       f"{hi:.3f}]"
                if which == "adapter" and twin:
                    x, y = by[(run, "adapter")], by[(twin, "adapter")]
                    d, dlo, dhi = bootstrap({t: [sum(x[t]) / len(x[t]) - sum(y[t]) / len(y[t])] for t in x})
                    line += f"   off - on: {d:+.3f} [{dlo:+.3f}, {dhi:+.3f}]"
                print(line)

if __name__ == "__main__":
    main()
