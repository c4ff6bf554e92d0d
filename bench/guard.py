"""guard.py's latency per tool call, against the recipe's 10-20 ms (target: median <= 1 ms, p99 <= 5 ms).

Four workloads, each call timed on its own, both wall-clock (perf_counter) and the thread's CPU time
(thread_time: what the guard itself costs, not the scheduler of a busy machine); CPU only:
  corpus     every call of tests/guard_corpus.jsonl, a fresh Guard and session each time (so the time includes
             indexing its short conversation), repeated --repeat times
  50KB       write tools of all three harnesses writing ~50 KB of Python source (pi write, opencode write,
             hermes write_file) and a 50 KB heredoc through bash
  rollout    a 200-message rollout (100 tool calls, 0.5-8 KB tool outputs): one session per rollout, call N
             checked against the N-th prefix of the conversation, as the proxy does
  cold-200   one throwaway Guard.check on the full 200-message history (no session: everything indexed at
             once): the worst case, for reference only; the proxy keeps a session per rollout
  800 turns  one session of --turns tool calls (every 5th writes a script that later calls run): the first and
             the last quarter of its calls side by side - a guard whose cost grows with the session is not flat

    python bench/guard.py [--repeat 20] [--turns 800]
"""
import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from guard import Guard  # noqa: E402

CTX = json.loads((ROOT / "tests" / "guard_contexts.json").read_text())
CORPUS = [json.loads(line) for line in (ROOT / "tests" / "guard_corpus.jsonl").read_text().splitlines() if line]
RECIPE_MS = 10.0


def tool_call(name, arguments, call_id="call_1"):
    return {"id": call_id, "type": "function", "function": {
        "name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}}


def timed(fn):
    """(wall ms, cpu ms), result."""
    t, c = time.perf_counter_ns(), time.thread_time_ns()
    v = fn()
    return ((time.perf_counter_ns() - t) / 1e6, (time.thread_time_ns() - c) / 1e6), v


def python_source(rng, size):
    """Plausible Python source of about `size` characters."""
    out, i = [], 0
    while sum(map(len, out)) < size:
        out.append(f"def handler_{i}(request, retries={rng.randint(1, 9)}):\n"
                   f"    \"\"\"Parse field {i} of the request and return the cleaned value.\"\"\"\n"
                   f"    value = request.get('field_{i}', '').strip()\n"
                   f"    if not value:\n        raise ValueError('missing field_{i}')\n"
                   f"    return [part.strip() for part in value.split(',') if part][:{rng.randint(2, 50)}]\n\n\n")
        i += 1
    return "".join(out)


def corpus_times(repeat):
    times = []
    for _ in range(repeat):
        for case in CORPUS:
            guard = Guard.for_task(case.get("guard"), proxy_host=case.get("proxy_host"),
                                     **CTX.get("setups", {}).get(case["context"], {}))
            c = case["call"]
            call = tool_call(c["name"], c.get("arguments_raw", c.get("arguments")))
            msgs = [{"role": "system", "content": CTX["systems"][case["harness"]]}] + CTX["contexts"][case["context"]]
            times.append(timed(lambda: guard.check(call, CTX["tools"][case["harness"]], msgs))[0])
    return times


def big_write_times(repeat, rng):
    src = python_source(rng, 50_000)
    calls = [("pi", tool_call("write", {"path": "src/handlers.py", "content": src})),
             ("opencode", tool_call("write", {"filePath": "src/handlers.py", "content": src})),
             ("hermes", tool_call("write_file", {"path": "src/handlers.py", "content": src})),
             ("pi", tool_call("bash", {"command": f"cat > src/handlers.py <<'EOF'\n{src}EOF\npython -m py_compile "
                                                  "src/handlers.py"}))]
    times = []
    for _ in range(repeat):
        for h, call in calls:
            msgs = [{"role": "system", "content": CTX["systems"][h]}] + CTX["contexts"]["repair"]
            ms, v = timed(lambda: Guard().check(call, CTX["tools"][h], msgs))
            assert v.allowed, v
            times.append(ms)
    return times


def rollout_messages(rng, calls=100):
    cmds = ["python -m pytest -q", "grep -rn split_row src", "cat src/parse.py", "git diff",
            "pip install -i https://pypi.internal.example/simple -e .", "ls -la tests", "python -c 'import parse'",
            "bash scripts/check_{}.sh", "git status --short"]
    msgs = [{"role": "system", "content": CTX["systems"]["pi"]}, CTX["contexts"]["repair"][0]]
    calls_out = []
    for i in range(calls):      # every 5th call writes a script of its own (the session remembers each), others run
        call = tool_call("write", {"path": f"scripts/check_{i}.sh", "content": f"python -m pytest -q -k case_{i}\n"},
                         f"c{i}") if i % 5 == 0 else tool_call("bash", {"command": rng.choice(cmds).format(i - i % 5)},
                                                                   f"c{i}")
        calls_out.append((len(msgs), call))
        msgs.append({"role": "assistant", "content": f"Step {i}.", "tool_calls": [call]})
        lines = [f"src/parse.py:{rng.randint(1, 400)}: value = row[{rng.randint(0, 9)}]  # https://docs.python.org/3/"
                 for _ in range(rng.randint(5, 100))]
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "\n".join(lines)})
    return msgs, calls_out


def rollout_times(repeat, rng, turns=100):
    times, cold = [], []
    for _ in range(repeat):
        msgs, calls = rollout_messages(rng, turns)
        session = Guard().session()
        tools = CTX["tools"]["pi"]
        for k, call in calls:
            ms, v = timed(lambda: session.check(call, tools, msgs[:k]))
            assert v.allowed, v
            times.append(ms)
        cold.append(timed(lambda: Guard().check(calls[-1][1], tools, msgs))[0])
    return times, cold, len(msgs)


def row(name, times):
    out = []
    for k in (0, 1):
        xs = [t[k] for t in times]
        med = statistics.median(xs)
        p99 = statistics.quantiles(xs, n=100, method="inclusive")[98] if len(xs) > 1 else xs[0]
        out += [med, p99]
    wm, wp, cm, cp = out
    print(f"{name:<26}{len(times):>6}{wm:>9.3f}{wp:>9.3f}{cm:>9.3f}{cp:>9.3f}"
          f"{RECIPE_MS / wm:>8.0f}x{RECIPE_MS / cm:>7.0f}x")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--turns", type=int, default=800, help="tool calls of the long session (default 800)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    corpus = corpus_times(a.repeat)
    writes = big_write_times(a.repeat, rng)
    roll, cold, n = rollout_times(max(1, a.repeat // 4), rng)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"guard check per call, ms ({os.cpu_count()} CPUs, load {load:.1f}); "
          f"ratio = recipe's {RECIPE_MS:.0f} ms / median")
    print(f"{'workload':<26}{'calls':>6}{'wall med':>9}{'wall p99':>9}{'cpu med':>9}{'cpu p99':>9}"
          f"{'wall':>9}{'cpu':>8}")
    row("corpus (fresh guard)", corpus)
    row("50 KB writes", writes)
    row(f"rollout, {n} messages", roll)
    wm, wp, cm, cp = row("all of the above", corpus + writes + roll)
    row(f"cold {n} messages (ref)", cold)
    long, _, n = rollout_times(1, rng, turns=a.turns)     # one long session: is a call at turn 800 as cheap as at 1?
    q = len(long) // 4
    first, last = row(f"turns 1-{q} of {len(long)}", long[:q]), row(f"turns {len(long) - q + 1}-{len(long)}", long[-q:])
    print(f"session of {n} messages: median wall at its last quarter / first quarter = {last[0] / first[0]:.2f}x, "
          f"p99 {last[1] / first[1]:.2f}x (flat: about 1)")
    for what, med, p99 in (("wall", wm, wp), ("cpu", cm, cp)):
        ok = "met" if med <= 1.0 and p99 <= 5.0 else "NOT met"
        print(f"target median <= 1 ms, p99 <= 5 ms ({what}): {ok}: median {med:.3f} ms, p99 {p99:.3f} ms, "
              f"{RECIPE_MS / med:.0f}x under the recipe's {RECIPE_MS:.0f} ms")


if __name__ == "__main__":
    main()
