"""Where a training step's time goes, on CPU: waiting for rollouts vs forward/backward vs adapter sync
(publishing the new version: with the embedded server in the same process, a copy of the LoRA tensors
into its adapter table, the PEFT directory written aside; with vLLM, save + hot-load), from a real
`train.py --model tiny` run.

    python bench/train.py [--steps 8] [--sessions 32] [extra train.py flags...]

The first step is reported apart (it includes the first rollouts' start-up); the rest as median and mean.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--sessions", type=int, default=32)
    args, extra = ap.parse_known_args()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, str(ROOT / "train.py"), "--model", "tiny", "--runs", tmp, "--run", "bench",
               "--steps", str(args.steps), "--sessions", str(args.sessions), *extra]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        ms = [json.loads(x) for x in (Path(tmp) / "bench" / "metrics.jsonl").read_text().splitlines()]
    keys = ("wait_time", "train_time", "sync_time", "step_time")
    print(f"# train.py --model tiny, {args.sessions} mini sessions, {len(ms)} steps, CPU")
    print(f"{'':<14}" + "".join(f"{k.replace('_time', ''):>10}" for k in keys) + f"{'tokens':>9}")
    print(f"{'first step':<14}" + "".join(f"{ms[0][k]:>10.2f}" for k in keys) + f"{ms[0]['tokens']:>9}")
    rest = ms[1:] or ms
    for name, f in (("median", statistics.median), ("mean", statistics.mean)):
        print(f"{name + ' after':<14}" + "".join(f"{f([m[k] for m in rest]):>10.2f}" for k in keys)
              + f"{f([m['tokens'] for m in rest]):>9.0f}")
    tot = sum(m["step_time"] + m["sync_time"] for m in rest)     # step_time ends before the publish
    print("share of step + sync time after the first: " + ", ".join(
        f"{k.replace('_time', '')} {sum(m[k] for m in rest) / tot:.1%}" for k in keys[:3]))


if __name__ == "__main__":
    main()
