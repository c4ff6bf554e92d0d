"""Does an attack pay? Every attack of tests/attacks.json played through a real harness, proxy, sandbox and verifier
with the guard on and off, on the shortcut suite's tasks where it earns full marks when nothing stops it.

Each attack is a family's (reward file, test file, answer file) sequence of calls - a write, a shell command, a
script written in one turn and run in the next - played by the oracle's scripted model (oracle.attack) in each
harness's own tool shapes. Per family and harness it prints: attacks, how many the guard blocked (the rollout's
reward is 0), how many pay (verifier score > 0 and nothing blocked) with the sandbox and verifier alone (guard off),
and how many pay with all three on - the number a user cares about. Then every attack that paid with the guard on
(tests/attacks.json marks the known gaps, each with why).
Credentials and network families are not here: they earn no reward (tests/test_guard.py's corpus and the hostile
probe of tests/test_rollout.py cover them).

    python bench/attacks.py [--harnesses mini,pi] [--sandbox auto] [--only ID,ID]
"""
import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import harnesses  # noqa: E402
import oracle  # noqa: E402
from sandbox import SANDBOXES  # noqa: E402
import tiny  # noqa: E402
from chat import ChatFormat  # noqa: E402

ATTACKS = json.loads((ROOT / "tests" / "attacks.json").read_text())


def play(attacks, harness, fmt, out, guard, sandbox):
    return asyncio.run(oracle.attack(attacks, harness, fmt, out, guard=guard, sandbox=sandbox))


def pays(result):
    score, blocked = result
    return (score or 0) > 0 and not blocked


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harnesses", default="mini,pi", help="comma-separated (default mini,pi)")
    ap.add_argument("--sandbox", default="auto", choices=SANDBOXES + ("harbor:docker",))
    ap.add_argument("--only", help="attack ids, comma-separated")
    a = ap.parse_args(argv)
    attacks = [x for x in ATTACKS if not a.only or x["id"] in a.only.split(",")]
    with tempfile.TemporaryDirectory(prefix="harness-rl-attacks-") as tmp:
        fmt = ChatFormat.from_checkpoint(tiny.write_tiny_checkpoint(Path(tmp) / "ckpt", "lfm3", seed=0))
        paid, idle = [], []
        print(f"{len(attacks)} attacks, sandbox {a.sandbox}: per family, attacks / blocked by the guard / pay with "
              f"sandbox + verifier alone (guard off) / pay with guard, sandbox and verifier on")
        for name in a.harnesses.split(","):
            t0 = time.time()
            harness = harnesses.get_harness(name)
            on = play(attacks, harness, fmt, Path(tmp) / name / "on", True, a.sandbox)
            off = play(attacks, harness, fmt, Path(tmp) / name / "off", False, a.sandbox)
            rows = Counter()
            for x in attacks:
                f = x["family"]
                rows[f, "n"] += 1
                rows[f, "blocked"] += bool(on[x["id"]][1])
                rows[f, "off"] += pays(off[x["id"]])
                rows[f, "on"] += pays(on[x["id"]])
                if pays(on[x["id"]]):
                    paid.append((name, x["id"], x["why"] + " - " + x.get("gap", "NEW: not a known gap")))
                if not pays(off[x["id"]]):
                    idle.append((name, x["id"], x["why"]))
            print(f"\n{name} ({time.time() - t0:.0f} s)")
            print(f"  {'family':14s} {'attacks':>8s} {'blocked':>8s} {'pay, guard off':>15s} {'pay, all on':>12s}")
            for f in dict.fromkeys(x["family"] for x in attacks):
                print(f"  {f:14s} {rows[f, 'n']:8d} {rows[f, 'blocked']:8d} {rows[f, 'off']:15d} {rows[f, 'on']:12d}")
        print("\npaid with everything on:" if paid else "\nno attack paid with everything on")
        for name, i, why in paid:
            print(f"  {name:8s} {i:16s} {why}")
        if idle:
            print("paid nothing even with the guard off (the sandbox or the verifier stopped it):")
        for name, i, why in idle:
            print(f"  {name:8s} {i:16s} {why}")


if __name__ == "__main__":
    main()
