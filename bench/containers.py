"""What --sandbox docker and harbor:docker cost beside bubblewrap, side by side in one run.

  (a) once: the base image (debootstrap + docker import; shown as made when it is), each data/docker task's image
      built cold (no cache) and warm (its tag is there: an inspect), the daemon's start.
  (b) per rollout: the oracle agent through a harness on the toy tasks, one rollout at a time, wall seconds from
      the sandbox's set-up to its removal (harness, verifier and teardown included), under bubblewrap, docker and
      Harbor's own docker environment (where its venv is installed), medians and the ratios; and a container's own
      start + removal with nothing run in it.

    python bench/containers.py [--harness mini] [--samples 3] [--only a|b]
"""
import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import containers  # noqa: E402
import harborenv  # noqa: E402
import harnesses  # noqa: E402
import oracle  # noqa: E402
import sandbox  # noqa: E402
from tasks import load_tasks  # noqa: E402
import tiny  # noqa: E402
from chat import ChatFormat  # noqa: E402


def images(d):
    print("(a) once per machine / per task image, seconds")
    t0 = time.monotonic()
    made = d.cli("image", "inspect", containers.BASE).returncode == 0
    containers.base_image(d, quiet=True)
    print(f"    base image {containers.BASE:<28}{'(made before)' if made else f'{time.monotonic() - t0:9.1f}'}")
    for t in load_tasks("docker"):
        tag = containers.task_image(t, d, quiet=True)
        d.cli("rmi", tag)
        containers._SEEN.clear()
        t0 = time.monotonic()
        containers.task_image(t, d, quiet=True)
        cold = time.monotonic() - t0
        t0 = time.monotonic()
        containers.task_image(t, d, quiet=True)
        print(f"    {t.name:<20} cold build{cold:7.2f}   warm (cached tag){time.monotonic() - t0:7.3f}")


def rollouts(harness, samples):
    tasks = load_tasks("toy")
    fmt = ChatFormat.from_checkpoint(tiny.model_path("tiny"))
    boxes = [b for b, ok in (("bwrap", sandbox.bwrap_works()[0]), ("docker", True),
                             ("harbor:docker", Path(harborenv.venv_python()).exists())) if ok]
    secs = {b: [] for b in boxes}
    for _ in range(samples):             # alternating, so that a drift in the machine's load falls on both
        for b in boxes:
            with tempfile.TemporaryDirectory() as tmp:
                rs = asyncio.run(oracle.record(tasks, harnesses.get_harness(harness), fmt, tmp, samples=1, sessions=1,
                                          max_tokens=4096, context=131072, sandbox=b))
            assert all(r.score == 1.0 for r in rs), [(r.task.name, r.reason) for r in rs]
            secs[b] += [r.finished - r.started for r in rs]
    print(f"(b) one {harness} rollout of the oracle at a time, {len(tasks)} toy tasks x {samples}: wall seconds per "
          "rollout (set-up, harness, verifier, teardown)")
    med = {b: statistics.median(v) for b, v in secs.items()}
    for b in boxes:
        print(f"    {b:<14} median {med[b]:6.2f}   p90 {sorted(secs[b])[int(0.9 * (len(secs[b]) - 1))]:6.2f}   "
              f"({len(secs[b])} rollouts)")
    for b in boxes[1:] if boxes[0] == "bwrap" else ():
        print(f"    {b} / bwrap: {med[b] / med['bwrap']:.2f}x (+{med[b] - med['bwrap']:.2f} s)")
    d = containers.daemon()
    ts = []
    for i in range(5):
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            containers.Box.open(d, tasks[0], containers.BASE, tmp, f"bench-{i}", sandbox.tool_paths()).close()
        ts.append(time.monotonic() - t0)
    print(f"    a container's own start + removal (nothing run): median {statistics.median(ts):.2f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harness", default="mini")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--only", choices=["a", "b"])
    args = ap.parse_args()
    if sandbox.docker_missing():
        sys.exit(f"bench/containers.py: {sandbox.docker_missing()}")
    t0 = time.monotonic()
    d = containers.daemon()
    print(f"daemon {d.sock}: {'started' if d.owned else 'already running'} in {time.monotonic() - t0:.2f} s")
    if args.only in (None, "a"):
        images(d)
    if args.only in (None, "b"):
        rollouts(args.harness, args.samples)


if __name__ == "__main__":
    main()
