"""Rollouts inside real harnesses: one rollout in its sandbox, what it records (`Rollout`, `Turn`), its ATIF trajectory.

`run_rollout`: a fresh sandbox, the harness, then the verifier; a crash, a server error or a timeout before any model
reply leaves the rollout ungraded (score None), a later timeout or harness failure is graded as the work dir was left
(Harbor's rule); the agent timeout counts the agent's own time, not its requests' wait at the model server. A no-network
task's agent gets its own network namespace (relay.py); under --sandbox docker every agent is in its task's own
container (containers.py), its proxy through the same relay; under harbor:<type> in Harbor's own environment
(harborenv.py), the same relay where it runs here, else the proxy's URL as the sandbox reaches it (--proxy-url). The
guard proxy the harness talks to, which records each turn: proxy.py; the pool of concurrent rollouts: pool.py.

Left out: a firewall for public / allowlist tasks under bubblewrap (the guard's hosts rule; the server needs the key
only the proxy holds), CPU limits under bubblewrap (sandbox.Limits bounds processes and memory).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import secrets
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import containers
import harborenv
import sandbox as SB
import taskenv

RELAY, RELAY_SOCKET = Path(__file__).resolve().parent / "relay.py", "/run/harness-rl/proxy.sock"
# the model name every harness is configured with; whatever it sends, the proxy asks the server for the adapter
POLICY = "policy"
WALL = 10                # a rollout's wall clock may reach 10x its agent timeout, waiting on the model included
DISK_EVERY = 0.5         # seconds between two counts of a rollout's files on disk (past its bound: stopped)
_DISK = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="disk-count")

# why a rollout is ungraded (counted per step in metrics.jsonl and the progress line)
UNGRADED = ("timeout", "harness", "server", "verifier", "setup", "cancelled")


@dataclass
class Turn:
    """One model call inside a rollout, exactly as the server returned it (grpo.build_sequences trains on it)."""
    prompt_ids: list
    completion_ids: list
    logprobs: list          # sampling logprob of each completion token
    version: int            # adapter version that produced it


@dataclass
class Rollout:
    task: object                    # tasks.Task
    harness: str
    group: str = ""
    index: int = 0
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    start_version: int = 0                           # the adapter version new requests used when it began
    turns: list = field(default_factory=list)        # Turn, in order
    exchanges: list = field(default_factory=list)    # (request messages, answer message, turn index) for ATIF
    tools: list | None = None
    tool_calls: int = 0
    verdicts: list = field(default_factory=list)     # {"call", "rule", "note"} of every blocked call
    blocked = property(lambda self: bool(self.verdicts))     # the guard blocked one of its calls
    aux_requests: int = 0
    final_message: str = ""            # the model's last answer (graded by tasks that read AGENT_OUTPUT)
    errors: list = field(default_factory=list)       # infrastructure failures: make the rollout ungraded
    failure: str = ""                  # why it is ungraded, one of UNGRADED (empty when graded)
    exit_code: int | None = None
    pid: int | None = None             # the harness's process (and process group) id
    timed_out: bool = False
    over_disk: bool = False            # stopped: its files passed their bound on disk (graded as left, as a timeout)
    harness_failed: bool = False       # its harness exited failing after the model answered (graded as left)
    score: float | None = None
    reason: str = ""
    reward: float | None = None        # set by the pool's reward function (train.py's), never here
    started: float = 0.0
    finished: float = 0.0
    model_seconds: float = 0.0         # wall time with a model request out at the server (not the agent's own)
    model_out: int = 0                 # requests out now, and since when
    model_since: float = 0.0
    guard: object = None
    guard_context: dict = field(default_factory=dict)   # what its guard was built from: `guard.py scan` rebuilds it

    def waiting_on_model(self, out: bool):
        """A model request goes out (True) or comes back (False): overlapping requests count once."""
        now = time.monotonic()
        if out and not self.model_out:
            self.model_since = now
        self.model_out += 1 if out else -1
        if not out and not self.model_out:
            self.model_seconds += now - self.model_since

    def model_time(self) -> float:
        """Seconds so far with a model request out at the server (queueing and decoding there)."""
        return self.model_seconds + (time.monotonic() - self.model_since if self.model_out else 0.0)


# ----------------------------------------------------------------------------- one rollout

async def run_rollout(r: Rollout, harness, proxy, root, *, max_tokens, context, timeout=None, keep=False,
                      sandbox="auto", wall=WALL):
    """Run one rollout to the end: sandbox, harness, verifier. Never raises for the rollout's own failures (they go
    to r.errors / r.failure / r.score None); the reward is the pool owner's to decide, once. timeout: the agent's
    budget of its own seconds (default: the task's), `wall` x that in wall time at most (_agent_clock). proxy: the
    proxy.Proxy its harness talks to (the rollout is registered there while it runs)."""
    root = Path(root).resolve()           # absolute: bwrap mounts and the guard judge real paths
    box = root / r.id
    work, home, tmp = box / "work", box / "home", box / "tmp"
    proc = socket_server = bounds = container = harbor = None
    abandoned = threading.Event()       # set once this rollout is over: a verifier thread still running cleans up
    if sandbox == "auto":
        sandbox = SB.resolve_sandbox("auto")[0]
    r.started = time.time()
    boxed = sandbox in ("bwrap", "docker") or sandbox.startswith("harbor:")
    # where the agent sees its HOME and TMPDIR (and its work dir, below): in a sandbox the same paths in every rollout
    # (harnesses put them in their system prompts and tool descriptions: one shared prefix for the server's prompt
    # cache and for training)
    seen_home, seen_tmp = (SB.AGENT_HOME, SB.AGENT_TMP) if boxed else (str(home), str(tmp))
    budget = timeout or r.task.agent_timeout
    try:
        for d in (home, tmp):
            d.mkdir(parents=True, exist_ok=True)
        image = None        # docker: the task's image (built once per run) says where the work dir is
        if sandbox == "docker" or sandbox == "harbor:docker":
            image = await asyncio.to_thread(containers.task_image, r.task, containers.daemon(), True)
        if sandbox.startswith("harbor:"):      # Harbor's environment says it; the proxy by a socket where it is local
            harbor = harborenv.Box(r.task, sandbox.partition(":")[2], box, docker=image and containers.daemon(), image=image)
            if harbor.local:
                socket_server, path = await proxy.open_socket(r)
            tools = SB.tool_paths([*harness.sandbox_paths(), RELAY])
            seen = (await harbor.open(tools, path if harbor.local else None, RELAY_SOCKET)).workdir
        else:
            seen = containers.workdir(r.task, image, containers.daemon()) if image else taskenv.workdir(r.task, work) if boxed else str(work)
        proxy.register(r, seen, seen_home, seen_tmp, private=[root])
        if (sandbox == "docker" or harbor is not None) and r.task.container.dockerfile:
            work.mkdir()           # its image holds the work dir
        else:
            await asyncio.to_thread(taskenv.materialize, r.task, work)
        harness.prepare(home, work, tmp, proxy.base_url(r, remote=harbor is not None and not harbor.local), r.secret,
                        POLICY, max_tokens=max_tokens, context=context)
        launch = harness.launch(r.task.instruction, seen_home, seen, seen_tmp, r.id, POLICY)
        argv, env = launch.argv, dict(launch.env)
        # `python3` in the agent's shell is the interpreter the verifier uses (no pyenv shim in between)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", os.defpath)
        relayed = [sys.executable, "-I", str(RELAY), RELAY_SOCKET, proxy.url.rsplit(":", 1)[1], "--", *argv]
        if harbor is not None:
            await harbor.copy_in(work if any(work.iterdir()) else None)
            if not harbor.local:        # a remote sandbox runs the image's python3 (this one stays here)
                argv = ["python3", *argv[1:]] if argv[0] == sys.executable else argv
            proc = await harbor.start(relayed if harbor.local else argv, taskenv.task_env(r.task) | env, launch.stdin,
                                      timeout=wall * budget + 60)
        elif sandbox == "docker":          # its own container; the proxy through its socket, whatever its network
            socket_server, path = await proxy.open_socket(r)
            container = await asyncio.to_thread(
                containers.Box.open, containers.daemon(), r.task, image, box, r.id, SB.tool_paths([*harness.sandbox_paths(), RELAY]),
                offline=taskenv.offline_task(r.task), mounts=[(path, RELAY_SOCKET, True)])
            await asyncio.to_thread(container.copy_in, work)
            argv = container.argv(relayed, taskenv.task_env(r.task) | env, stdin=launch.stdin is not None)
            env = None
        else:
            taskenv.refuse_dir(r.task, sandbox)
        if sandbox == "bwrap":
            SB.own(work, home, tmp)
            hide = SB.private_paths(Path(r.task.path).resolve().parent, root)
            mounts = [(work, seen, True), (home, seen_home, True), (tmp, seen_tmp, True)]
            offline = taskenv.offline_task(r.task) and proxy.socket_dir
            if offline:     # its own network namespace: its socket comes in, relay.py serves it at the proxy's port
                socket_server, path = await proxy.open_socket(r)
                mounts.append((path, RELAY_SOCKET, True))
                argv = relayed
            argv = SB.bwrap_args([], SB.tool_paths([*harness.sandbox_paths(), RELAY]), hide, chdir=seen,
                                 network=not offline, mounts=mounts, setenv=taskenv.task_env(r.task)) + list(argv)
        elif sandbox == "dir":
            env = taskenv.task_env(r.task) | env         # no sandbox: the task's variables go to the harness itself
        if sandbox in ("bwrap", "dir"):       # (containers bound their own) a fork bomb, a memory hog, a huge file
            bounds = taskenv.limits(r.task)         # end it alone
            argv = bounds.argv(argv)
        if harbor is None:
            proc = await _spawn(r, argv, work, env, box / "harness.log", launch.stdin)
        cap = r.task.container.storage_mb or SB.LIMITS["disk_mb"]      # its files: the box, its container's own
        disk = [box, *await asyncio.to_thread((container or harbor).disk_paths)] if container or harbor else [box]
        r.exit_code = await _agent_clock(r, proc, budget, wall, lambda: SB.disk_mb(disk, cap) > cap)
        if harbor is not None:
            await harbor.stop()
        else:
            await asyncio.to_thread(SB.wait_dead, SB.kill(proc.pid))     # nothing of the agent runs on now
        proxy.unregister(r)            # nothing the harness left behind can reach the model now
        # A timeout is the agent's spent budget, graded as the work dir was left with no reply (Harbor grades its
        # AgentTimeoutError too): a policy that loops earns its 0. Before any model reply it is the server's: ungraded.
        # So is a stop for its files' size on disk (over the task's storage_mb, else LIMITS'): a filler earns its 0.
        cut = f"its files passed {cap} MB on disk" if r.over_disk else f"timed out after {budget:g}s of its own " \
            "time" + (f" ({r.model_time():.0f}s more waiting on the model)" if r.model_time() >= 1 else "")
        stopped = r.timed_out or r.over_disk
        ok, why = (bool(r.turns), f"{cut} before any model reply") if stopped else \
            await asyncio.to_thread(harness.succeeded, r.exit_code, home, tmp)
        if not ok and not stopped and r.turns:
            # it failed after the model had answered (hermes -z exits 1 when the policy leaves it no final answer):
            # the agent's own failure, graded as the work dir was left, as Harbor verifies after a
            # NonZeroAgentExitCodeError (trial/single_step.py). A server error still leaves it ungraded (r.errors).
            cut = f"the harness failed: {why} ({_tail(box / 'harness.log', 200).strip()})"
            r.harness_failed, stopped, ok = True, True, True
        if not ok:
            r.errors.append(f"harness: {why}; log: {_tail(box / 'harness.log')}")
            r.failure = r.failure or ("timeout" if r.timed_out else "harness")
        out = "" if stopped else r.final_message
        if r.errors:
            r.score, r.reason = None, r.errors[0]
        elif harbor is not None:
            res = await harbor.verify(out)
        else:
            def grade():    # a thread: cancelled (at shutdown) it runs on, so it removes what it wrote itself
                try:
                    return containers.verify(r.task, container, out) if container is not None else \
                        taskenv.verify(r.task, work, agent_output=out, sandbox=sandbox, hide=[root])
                finally:
                    if abandoned.is_set() and not keep:
                        SB.rmtree(box)
            res = await asyncio.to_thread(grade)
        if not r.errors:
            r.score, r.reason = res.score, (f"{cut} (graded as left): " if stopped else "") + res.reason
            if res.score is None:
                r.failure = "verifier"
    except asyncio.CancelledError:
        r.errors.append("cancelled")
        r.failure = r.failure or "cancelled"
        raise
    except Exception as e:             # a broken task or harness setup: this rollout is ungraded
        r.errors.append(f"{type(e).__name__}: {e}")
        r.score, r.reason = None, r.errors[-1]
        r.failure = r.failure or "setup"
    finally:
        if proc is not None and harbor is None:
            SB.kill(proc.pid)
        if socket_server is not None:
            socket_server.close(), [t.cancel() for t in list(socket_server.forwards)]
            Path(proxy.socket_dir, f"{r.id}.sock").unlink(missing_ok=True)
        proxy.unregister(r)
        r.finished = time.time()
        if container is not None:
            await asyncio.to_thread(container.close)
        if harbor is not None:
            await harbor.close()
        abandoned.set()
        if not keep:
            SB.rmtree(box)
        if bounds is not None:          # last: a cancel arriving in this await must not skip the cleanup above
            await asyncio.to_thread(bounds.close)
    return r


async def _spawn(r: Rollout, argv, work, env, log, stdin):
    """The harness as a local process (its whole sandbox dies with us, even by SIGKILL), its input written."""
    with open(log, "wb") as out:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=work, env=env, stdout=out, stderr=out, **SB.spawn_kw(argv),
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL)
        finally:
            SB.close_fds(argv)
    r.pid = proc.pid
    SB.watch(proc.pid)
    if stdin is not None:
        proc.stdin.write(stdin)
        await proc.stdin.drain()
        proc.stdin.close()
    return proc


async def _agent_clock(r: Rollout, proc, budget, wall, over_disk=None):
    """Wait for the harness to exit; its exit code, or None with r.timed_out set once the agent has spent `budget`
    seconds of its own time (the wall clock less the time its model requests were out at the server: queueing at a
    loaded server is not the agent's) or `wall` x budget of wall time in all (a server that never answers), or
    with r.over_disk set once `over_disk()` says so (asked in a thread, again DISK_EVERY s after each answer)."""
    exited, t0, check = asyncio.ensure_future(proc.wait()), time.monotonic(), None
    while True:
        elapsed = time.monotonic() - t0
        left = min(budget - (elapsed - r.model_time()), wall * budget - elapsed)
        r.over_disk = bool(check and check.done() and check.result())
        if left <= 0 or r.over_disk:
            exited.cancel()
            r.timed_out = not r.over_disk
            return None
        if over_disk and (check is None or check.done()):     # threads of their own: not behind a verifier's
            check = asyncio.get_running_loop().run_in_executor(_DISK, over_disk)
        done, _ = await asyncio.wait({exited}, timeout=min(max(left, 0.05), DISK_EVERY))
        if done:
            return exited.result()


def _tail(path, n=400):
    """The end of a log the sandbox could have replaced (by a link, a FIFO): read as untrusted."""
    try:
        return SB.read_untrusted(path, n, tail=True).decode(errors="replace").replace("\n", " | ")
    except (OSError, ValueError):
        return ""


# ----------------------------------------------------------------------------- ATIF

def to_atif(r: Rollout, harness_release="", model_name=POLICY) -> dict:
    """The rollout as an ATIF v1.8 trajectory: the conversation the model saw, each model turn with its
    token ids and logprobs in metrics, tool results as observations; reward and verdicts in `extra`."""
    steps = []
    first = r.exchanges[0][0] if r.exchanges else []
    for m in first:
        if m.get("role") in ("system", "user", "developer"):
            steps.append({"step_id": len(steps) + 1, "source": "system" if m["role"] != "user" else "user",
                          "message": _text(m.get("content"))})
    for k, (messages, msg, ti, judged) in enumerate(r.exchanges):
        t = r.turns[ti]         # every call the model made: a blocked one too, marked (it never ran: no result)
        calls = [{"tool_call_id": c["id"], "function_name": c["function"]["name"],
                  "arguments": _args(c["function"].get("arguments")),
                  **({"extra": {"blocked_by": v.rule}} if v else {})} for c, v in judged]
        nxt = r.exchanges[k + 1][0] if k + 1 < len(r.exchanges) else []
        ids = {c["tool_call_id"] for c in calls}
        results = [{"source_call_id": m.get("tool_call_id"), "content": _text(m.get("content"))}
                   for m in nxt if m.get("role") == "tool" and m.get("tool_call_id") in ids]
        step = {"step_id": len(steps) + 1, "source": "agent", "model_name": model_name,
                "message": msg.get("content") or "",
                "metrics": {"prompt_tokens": len(t.prompt_ids), "completion_tokens": len(t.completion_ids),
                            "prompt_token_ids": list(t.prompt_ids), "completion_token_ids": list(t.completion_ids),
                            "logprobs": list(t.logprobs), "extra": {"adapter_version": t.version}}}
        if calls:
            step["tool_calls"] = calls
        if results:
            step["observation"] = {"results": results}
        steps.append(step)
    return {"schema_version": "ATIF-v1.8", "session_id": r.id,
            "agent": {"name": r.harness, "version": harness_release or "unknown", "model_name": model_name,
                      "tool_definitions": r.tools or []},
            "steps": steps,
            "final_metrics": {"total_prompt_tokens": sum(len(t.prompt_ids) for t in r.turns),
                              "total_completion_tokens": sum(len(t.completion_ids) for t in r.turns),
                              "total_steps": len(steps)},
            "extra": {"task": r.task.name, "group": r.group, "start_version": r.start_version, "score": r.score,
                      "reward": r.reward, "reason": r.reason, "failure": r.failure, "tool_calls": r.tool_calls,
                      "verdicts": r.verdicts, "errors": r.errors, "exit_code": r.exit_code,
                      "timed_out": r.timed_out, "harness_failed": r.harness_failed, "aux_requests": r.aux_requests,
                      "guard_context": r.guard_context, "seconds": round(r.finished - r.started, 3)}}


def _text(content):
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _args(a):
    if isinstance(a, dict):
        return a
    try:
        v = json.loads(a or "{}")
        return v if isinstance(v, dict) else {"_": v}
    except json.JSONDecodeError:
        return {"_raw": a}
