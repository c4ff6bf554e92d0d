"""The guard proxy's cost and the harnesses' start-up, side by side in one run.

  (a) proxy overhead: 48 concurrent sessions send chat requests (with tools; the answer carries a tool call,
      so the guard runs) through the proxy to a null upstream that answers at once, vs the same load sent
      straight to the upstream; prints p50 / p99 latency of both and the difference.
  (b) start-to-first-request: each harness launched as a rollout would be (fresh sandbox, its config, its
      offline settings) until its first chat request reaches the proxy, under --sandbox dir and under
      bubblewrap side by side (what isolation costs each rollout).

  (c) what a session costs: CPU seconds of its own processes (start-up + per turn) and peak memory, per harness,
      against the numbers the pools start from (harnesses.Harness.cost; rollout.Fit then measures as it runs).

    python bench/rollout.py [--sessions 48] [--requests 20] [--harnesses mini,pi,opencode,hermes] [--only a|b|c]

(c) also takes `pi:system-node`: pi on the system's node without the compile cache, as it ran before (Pi's doc).
"""
import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import harnesses  # noqa: E402
import pool  # noqa: E402
from proxy import Proxy  # noqa: E402
import rollout  # noqa: E402
import sandbox as SB  # noqa: E402
import servers  # noqa: E402
import tiny  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
ANSWER = {"id": "x", "object": "chat.completion", "prompt_token_ids": list(range(300)), "usage": {},
          "choices": [{"index": 0, "finish_reason": "tool_calls", "token_ids": list(range(40)),
                       "logprobs": {"content": [{"token": "t", "logprob": -0.5}] * 40},
                       "message": {"role": "assistant", "content": None, "tool_calls": [
                           {"id": "c1", "type": "function", "function": {
                               "name": "bash", "arguments": '{"command": "python -m pytest -q tests/"}'}}]}}]}


async def null_upstream(first_seen=None):
    async def chat(request):
        await request.read()
        if first_seen is not None and "t" not in first_seen:
            first_seen["t"] = time.perf_counter()
        return web.json_response(ANSWER)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"


async def load(urls_and_keys, requests):
    """Each session sends `requests` requests one after another; returns every latency."""
    lat = []
    body = {"model": "m", "messages": [{"role": "system", "content": "You are a coding agent. " * 200},
                                       {"role": "user", "content": "Fix the failing test."}], "tools": TOOLS}

    async def session(url, key):
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as s:
            for _ in range(requests):
                t = time.perf_counter()
                async with s.post(url + "/chat/completions", json=body) as r:
                    await r.read()
                    assert r.status == 200, r.status
                lat.append(time.perf_counter() - t)
    await asyncio.gather(*(session(u, k) for u, k in urls_and_keys))
    return lat


async def overhead(args):
    runner, up = await null_upstream()
    client = servers.Client(up)
    proxy = Proxy(client, lambda: ("m", 0))
    await proxy.start()
    tmp = Path(tempfile.mkdtemp())
    task = type("Task", (), {"guard": {}, "name": "bench"})()
    rollouts = [rollout.Rollout(task, "bench") for _ in range(args.sessions)]
    for r in rollouts:
        proxy.register(r, tmp / r.id)
    await load([(proxy.base_url(rollouts[0]), rollouts[0].secret)], 5)          # warm-up
    direct = await load([(up + "/v1", "x")] * args.sessions, args.requests)
    through = await load([(proxy.base_url(r), r.secret) for r in rollouts], args.requests)
    await proxy.stop()
    await client.close()
    await runner.cleanup()
    own = list(proxy.overhead)[-args.sessions * args.requests:]
    q = lambda xs, p: sorted(xs)[int(p * (len(xs) - 1))] * 1e3  # noqa: E731
    print(f"(a) {args.sessions} concurrent sessions x {args.requests} requests, null upstream, guard on "
          "(client, proxy and upstream share one event loop, so end-to-end latencies include queueing)")
    print(f"    {'':<34}{'p50 ms':>9}{'p99 ms':>9}")
    print(f"    {'end to end, direct to upstream':<34}{q(direct, .5):>9.2f}{q(direct, .99):>9.2f}")
    print(f"    {'end to end, through the proxy':<34}{q(through, .5):>9.2f}{q(through, .99):>9.2f}")
    print(f"    {'in the proxy (minus upstream call)':<34}{q(own, .5):>9.2f}{q(own, .99):>9.2f}   (target p50 <= 2 ms)")


async def first_request(name, sandbox="dir"):
    seen = {}
    runner, up = await null_upstream(seen)
    client = servers.Client(up)
    proxy = Proxy(client, lambda: ("m", 0))
    await proxy.start()
    harness = harnesses.get_harness(name)
    await asyncio.to_thread(harness.install, None, True)
    with tempfile.TemporaryDirectory() as tmp:
        box = Path(tmp)
        work, home, t = box / "work", box / "home", box / "tmp"
        for d in (work, home, t):
            d.mkdir()
        r = rollout.Rollout(type("Task", (), {"guard": {}, "name": "bench"})(), name)
        proxy.register(r, work)
        # measured up to the first request: max_tokens and context do not matter here
        harness.prepare(home, work, t, proxy.base_url(r), r.secret, "policy", max_tokens=256, context=8192)
        launch = harness.launch("List the files.", home, work, t, r.id, "policy")
        argv = launch.argv
        if sandbox == "bwrap":
            SB.own(work, home, t)
            argv = SB.bwrap_args([work, home, t], SB.tool_paths(harness.sandbox_paths()), SB.private_paths()) + argv
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(*argv, cwd=work, env=launch.env, **SB.spawn_kw(argv),
                                                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.DEVNULL)
        SB.close_fds(argv)
        if launch.stdin is not None:
            proc.stdin.write(launch.stdin)
        proc.stdin.close()
        while "t" not in seen and proc.returncode is None and time.perf_counter() - t0 < 120:
            await asyncio.sleep(0.01)
        SB.wait_dead(SB.kill(proc.pid))
        await proc.wait()
    await proxy.stop()
    await client.close()
    await runner.cleanup()
    return seen.get("t", float("nan")) - t0


async def session_cost(name, samples=2, waste=4):
    """(c): toy tasks played by the oracle agent through harness `name`, one session at a time, under the default
    sandbox: CPU seconds of the session's own processes (harness, sandbox, verifier: pool.others_cpu, read between
    sessions), fitted as start-up + per turn (least squares over the sessions), and the machine's peak memory in use
    above its start (run it on an idle machine)."""
    import oracle
    from tasks import load_tasks
    from chat import ChatFormat
    tasks = load_tasks("toy") * samples
    rows, mark = [], [None]

    children = pool.others_cpu       # the machine's busy time less this process's (the oracle server's): keep it idle

    def log(g):
        now = children()
        rows.append((len(g.rollouts[0].turns), now - mark[0]))
        mark[0] = now
    def used():
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        return (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) / 1024

    async def watch(peak):
        while True:
            peak[0] = max(peak[0], used())
            await asyncio.sleep(0.05)
    with tempfile.TemporaryDirectory() as tmp:
        fmt = ChatFormat.from_checkpoint(tiny.model_path("tiny"))
        await asyncio.to_thread(harnesses.get_harness(name).install, None, True)
        base, peak = used(), [0.0]
        watcher = asyncio.ensure_future(watch(peak))
        mark[0] = children()
        await oracle.record(tasks, harnesses.get_harness(name), fmt, tmp, samples=1, sessions=1, max_tokens=4096, context=131072,
                       waste=waste, log=log)
        watcher.cancel()
    n, sx, sy = len(rows), sum(t for t, _ in rows), sum(c for _, c in rows)
    sxx, sxy = sum(t * t for t, _ in rows), sum(t * c for t, c in rows)
    per_turn = (n * sxy - sx * sy) / (n * sxx - sx * sx) if n * sxx != sx * sx else 0.0
    start = (sy - per_turn * sx) / n
    return n, sy / n, start, per_turn, sx / n, peak[0] - base


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=48)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--harnesses", default="mini,pi,opencode,hermes")
    ap.add_argument("--only", choices=["a", "b", "c"])
    ap.add_argument("--cost-of", help=argparse.SUPPRESS)      # (c) for one harness, in a process of its own
    args = ap.parse_args()
    if args.cost_of:
        if args.cost_of == "pi:system-node":         # pi as it ran before it had its own Node: the system's, no cache
            harnesses.node_package = lambda: None
        n, cpu, start, turn, turns, peak = asyncio.run(session_cost(args.cost_of.split(":")[0]))
        print(f"    {args.cost_of:<16}{n:>9}{cpu:>8.2f}{start:>9.2f}{turn:>9.3f}{turns:>7.1f}{peak:>10.0f}"
              f"{str(harnesses.get_harness(args.cost_of.split(':')[0]).cost):>14}")
        return
    if args.only in (None, "a"):
        asyncio.run(overhead(args))
    if args.only in (None, "c"):
        print("(c) what a session costs, per harness: toy tasks played by the oracle, one session at a time, under "
              "the default sandbox (CPU of the session's own processes; compare harnesses.Harness.cost)")
        print(f"    {'':<16}{'sessions':>9}{'CPU s':>8}{'start s':>9}{'per turn':>9}{'turns':>7}{'peak MiB':>10}"
              f"{'cost now':>14}")
        for name in args.harnesses.split(","):     # one process each
            out = subprocess.run([sys.executable, __file__, "--cost-of", name], capture_output=True, text=True)
            print(out.stdout.rstrip() or f"    {name:<16} unavailable: {out.stderr.strip()[-300:]}")
    if args.only in (None, "b"):
        boxes = ["dir"] + (["bwrap"] if SB.bwrap_works()[0] else [])
        print("(b) start to first chat request, per harness (median of 3, alternating), seconds")
        print(f"    {'':<10}" + "".join(f"{b:>9}" for b in boxes) + ("    bwrap - dir" if len(boxes) == 2 else
                                                                        f"   (bwrap: {SB.bwrap_works()[1]})"))
        for name in args.harnesses.split(","):
            try:
                ts = {b: [] for b in boxes}
                for _ in range(3):
                    for b in boxes:
                        ts[b].append(asyncio.run(first_request(name, b)))
                med = {b: statistics.median(v) for b, v in ts.items()}
                print(f"    {name:<10}" + "".join(f"{med[b]:>9.2f}" for b in boxes) +
                      (f"    {med['bwrap'] - med['dir']:+.2f}" if len(boxes) == 2 else ""))
            except Exception as e:  # a harness that cannot be installed here is reported, not fatal
                print(f"    {name:<10} unavailable: {e}")


if __name__ == "__main__":
    main()
