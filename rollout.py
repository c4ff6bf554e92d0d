"""Rollouts inside real harnesses: the guard proxy, one rollout in its sandbox, its ATIF trajectory.

`Proxy`: each rollout has its own base URL `/r/<id>/v1` and secret; every tool call in an answer passes the guard
(a blocked one becomes a text note, reward 0); each turn is recorded exactly as the server returned it (requests
without tools are answered, not trained on). `run_rollout`: a fresh sandbox, the harness, then the verifier; a crash,
a server error or a timeout before any model reply leaves the rollout ungraded (score None), a later timeout is
graded as the work dir was left (Harbor's rule); the agent timeout counts the agent's own time, not the time its
requests wait at the model server. A no-network task's agent gets its own network namespace (relay.py); under
--sandbox docker every agent is in its task's own container (containers.py), its proxy through the same relay; under
harbor:<type> in Harbor's own environment (harborenv.py), the same relay where it runs here, else the proxy's URL as
the sandbox reaches it (--proxy-url). The pool of concurrent rollouts: pool.py.

Left out: a firewall for public / allowlist tasks under bubblewrap (the guard's hosts rule; the server needs the key
only the proxy holds), CPU limits under bubblewrap (sandbox.Limits bounds processes and memory).
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import hmac
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

import containers
import harborenv
import sandbox as SB
from servers import MAX_BODY, ChatStream
import taskenv
from guard import guard_for

CONTEXT_ERROR = "maximum context length"
RELAY, RELAY_SOCKET = Path(__file__).resolve().parent / "relay.py", "/run/harness-rl/proxy.sock"
# the model name every harness is configured with; whatever it sends, the proxy asks the server for the adapter
POLICY = "policy"
MAX_CONNECTIONS = 32     # at once, per rollout, through its Unix socket (a harness keeps a few)
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
    blocked = property(lambda self: bool(self.verdicts))     # the guard blocked a call: its reward is 0
    aux_requests: int = 0
    final_message: str = ""            # the model's last answer (graded by tasks that read AGENT_OUTPUT)
    errors: list = field(default_factory=list)       # infrastructure failures: make the rollout ungraded
    failure: str = ""                  # why it is ungraded, one of UNGRADED (empty when graded)
    exit_code: int | None = None
    pid: int | None = None             # the harness's process (and process group) id
    timed_out: bool = False
    over_disk: bool = False            # stopped: its files passed their bound on disk (graded as left, as a timeout)
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


# ----------------------------------------------------------------------------- the proxy

class Proxy:
    """adapter(): (model name to send the server, its version). sampling: the run's temperature, top_p and
    max_tokens (the ceiling on a harness's own limit); one left out is left to the server (OpenAI's defaults).
    guard=False turns the checks off (eval.py's ablation); calls are still counted."""

    def __init__(self, client, adapter, sampling=None, timeout=600, guard=True):
        self.client, self.adapter, self.timeout, self.guard_on = client, adapter, timeout, guard
        self.sampling = dict(sampling or {})
        self.rollouts, self.url, self._runner, self.socket_dir, self.public = {}, None, None, None, None
        self.in_use = collections.Counter()     # adapter name -> requests in flight on the server
        self.overhead = collections.deque(maxlen=100000)   # seconds per request spent in the proxy itself

    async def start(self, host="127.0.0.1", port=0, public=None):
        """Listen on host:port; public: the URL a sandbox elsewhere reaches it at (a tunnel to it, --proxy-url)."""
        self.public = public or None
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/r/{rid}/v1/chat/completions", self.chat)
        app.router.add_route("*", "/{tail:.*}", self.not_found)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError as e:
            await self._runner.cleanup()
            raise ValueError(f"the guard proxy cannot listen on {host}:{port} (--proxy-port): {e.strerror}") from None
        self.url = f"http://{host}:{self._runner.addresses[0][1]}"
        # where the Unix sockets of agents in their own network namespace live (/tmp: a long $TMPDIR would pass
        # AF_UNIX's 108-byte limit)
        self.socket_dir = tempfile.mkdtemp(prefix="harness-rl-proxy-", dir="/tmp" if os.path.isdir("/tmp") else None)
        return self.url

    async def stop(self):
        if self._runner:
            await self._runner.cleanup()
        if self.socket_dir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)

    async def open_socket(self, r: Rollout):
        """One rollout's way in from its own network namespace (bound into its sandbox, served there by relay.py): a
        Unix socket forwarded to this proxy, MAX_CONNECTIONS at once (not the trainer's file descriptors)."""
        forwards, path = set(), os.path.join(self.socket_dir, f"{r.id}.sock")

        async def forward(reader, writer):
            if len(forwards) >= MAX_CONNECTIONS:
                return writer.close()
            forwards.add(task := asyncio.current_task())    # held here (else collected while pending), cancelled at end
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.url.rsplit("/", 1)[1].split(":"))
                await asyncio.gather(SB.pipe(reader, up_writer), SB.pipe(up_reader, writer))
                up_writer.close()
            except (OSError, asyncio.CancelledError):   # cancelled as its rollout ends: asyncio's stream callback
                pass                                     # would print each cancelled handler's traceback (3.11)
            finally:
                forwards.discard(task)
                writer.close()
        server = await asyncio.start_unix_server(forward, path)
        os.chmod(path, 0o666)               # the sandbox's user connects to it (its dir stays 0700)
        server.forwards = forwards
        return server, path

    def base_url(self, rollout: Rollout, remote=False):
        """A rollout's base URL; remote: as a sandbox elsewhere reaches this proxy (`public`, --proxy-url)."""
        if remote and not self.public:
            raise ValueError("a remote sandbox reaches the proxy by a URL: --proxy-url")
        return f"{self.public.rstrip('/') if remote else self.url}/r/{rollout.id}/v1"

    def register(self, r: Rollout, work_dir=None, home=None, tmp=None, private=()):
        """work_dir (as the agent sees it) / home / tmp: the rollout's own (the guard judges paths against them,
        its config with the secret in home); private: dirs no rollout may touch but its own (all sandboxes, the run)."""
        task_dir = getattr(r.task, "path", None)
        r.guard_context = {"guard": getattr(r.task, "guard", None) or {}, "proxy_host": self.url,
                           "work_dir": str(work_dir) if work_dir else None, "home": str(home) if home else None,
                           "tmp": str(tmp) if tmp else None, "private": [str(p) for p in private],
                           "task_dir": str(Path(task_dir).resolve()) if task_dir else None}
        r.guard = guard_for(r.guard_context).session()
        self.rollouts[r.id] = r

    def unregister(self, r: Rollout):
        self.rollouts.pop(r.id, None)

    async def not_found(self, request):
        return web.json_response({"error": {"message": "not found"}}, status=404)

    async def chat(self, request):
        t0 = time.perf_counter()
        upstream = [0.0]
        try:
            return await self._chat(request, upstream)
        finally:
            self.overhead.append(time.perf_counter() - t0 - upstream[0])

    async def _chat(self, request, upstream):
        r = self.rollouts.get(request.match_info["rid"])
        auth = request.headers.get("Authorization", "").encode()
        if r is None or not hmac.compare_digest(auth, f"Bearer {r.secret}".encode()):
            return web.json_response({"error": {"message": "unknown rollout or bad key"}}, status=401)
        try:
            body = await request.json()
            messages = body["messages"]
            assert isinstance(messages, list) and isinstance(body.get("tools") or [], list)
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": {"message": f"body over {MAX_BODY} bytes"}}, status=400)
        except Exception:
            return web.json_response({"error": {"message": "expected a JSON chat request with messages"}}, status=400)
        tools = body.get("tools") or None
        name, version = self.adapter()
        # the harness's own limit counts only if it is a sane one; the trainer's is the ceiling either way
        asked = [v for v in (body.get("max_completion_tokens"), body.get("max_tokens"))
                 if isinstance(v, int) and not isinstance(v, bool) and v > 0]
        limits = asked[:1] + [self.sampling["max_tokens"]] if "max_tokens" in self.sampling else asked[:1]
        req = {"model": name, "messages": messages, "stream": False, "logprobs": True, "top_logprobs": 0,
               "return_token_ids": True,
               "user": r.id, **{k: v for k, v in self.sampling.items() if k in ("temperature", "top_p")}}
        if limits:
            req["max_tokens"] = min(limits)
        if tools:
            req["tools"] = tools
            if isinstance(body.get("tool_choice"), str):
                req["tool_choice"] = body["tool_choice"]
        try:
            t_up = time.perf_counter()
            self.in_use[name] += 1      # taken in the same loop tick as adapter(): an unload cannot slip between
            r.waiting_on_model(True)    # the agent's clock stops while its request is at the server
            try:
                resp = await asyncio.wait_for(self.client.chat(req), self.timeout)
            finally:
                r.waiting_on_model(False)
                upstream[0] = time.perf_counter() - t_up
                self.in_use[name] -= 1
                if not self.in_use[name]:
                    del self.in_use[name]
            choice, msg, finish = _read_reply(resp)
        except Exception as e:
            text = str(e)
            if self.rollouts.get(r.id) is not r:       # it ended (timed out) while this request was out
                return web.json_response({"error": {"message": "rollout ended"}}, status=400)
            if CONTEXT_ERROR in text:     # the session outgrew the context: end it normally, still graded
                msg, finish, resp, choice = {"role": "assistant", "content": "[context limit reached]",
                                             "tool_calls": []}, "length", {"usage": {}}, None
            else:
                r.errors.append(f"server: {text[:300]}")
                r.failure = r.failure or "server"
                # a 4xx, not a 5xx: harnesses retry 5xx for minutes (opencode up to ~75 s); the rollout is
                # ungraded anyway, so let the harness stop now
                return web.json_response({"error": {"message": "model request failed", "type": "invalid_request"}},
                                         status=400)
        if self.rollouts.get(r.id) is not r:           # graded already: nothing may change it now
            return web.json_response({"error": {"message": "rollout ended"}}, status=400)
        if tools and choice is not None:
            r.tools = tools
            judged = self._guard(r, msg, tools, messages)
            if not msg["tool_calls"] and finish == "tool_calls":
                finish = "stop"
            lps = [x["logprob"] for x in choice["logprobs"]["content"]]
            r.turns.append(Turn(resp["prompt_token_ids"], choice["token_ids"], lps, version))
            r.exchanges.append((messages, msg, len(r.turns) - 1, judged))
        elif choice is not None:
            r.aux_requests += 1
        r.final_message = msg.get("content") or ""        # what the harness gets, notes included
        usage = resp.get("usage") or {}
        if body.get("stream"):
            return await self._sse(request, msg, finish, usage, body)
        out = {"id": resp.get("id", f"chatcmpl-{uuid.uuid4().hex}"), "object": "chat.completion",
               "created": int(time.time()), "model": body.get("model") or name,
               "choices": [{"index": 0, "message": {k: v for k, v in msg.items() if v or k == "content"},
                            "finish_reason": finish}], "usage": usage}
        return web.json_response(out)

    def _guard(self, r: Rollout, msg, tools, messages):
        """Each tool call through the guard; a blocked one is removed and its note added to the content. -> every
        call the model made, with its verdict (None: allowed or not checked), for the ATIF record."""
        kept, notes, judged = [], [], []
        for call in msg["tool_calls"]:
            r.tool_calls += 1
            v = r.guard.check(call, tools, messages) if self.guard_on else None
            judged.append((call, None if v is None or v.allowed else v))
            if v is None or v.allowed:
                kept.append(call)
            else:
                notes.append(v.note)
                r.verdicts.append({"call": call, "rule": v.rule, "note": v.note})
        if notes:
            msg["content"] = "\n".join(filter(None, [msg.get("content")] + notes))
            msg["tool_calls"] = kept
        return judged

    async def _sse(self, request, msg, finish, usage, body):
        stream = await ChatStream().open(request, body.get("model") or POLICY)
        await stream.send({"role": "assistant", "content": ""})
        await stream.end(msg.get("content"), msg["tool_calls"], finish,
                         usage if (body.get("stream_options") or {}).get("include_usage") else None)
        return stream.resp


def _read_reply(resp):
    """(choice, assistant message, finish reason) from the server's reply, checked: token ids, one logprob per
    token, well-formed tool calls (a missing id gets one). Raises ValueError naming what is wrong (a server fault)."""
    choice = (resp.get("choices") or [None])[0] if isinstance(resp, dict) else None
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise ValueError("server reply has no choices[0].message")
    ids, prompt = choice.get("token_ids"), resp.get("prompt_token_ids")
    if not (isinstance(ids, list) and isinstance(prompt, list) and prompt):
        raise ValueError("server reply has no token_ids / prompt_token_ids (vLLM needs return_token_ids: a "
                         "version that supports it)")
    lps = ((choice.get("logprobs") or {}).get("content") or []) if isinstance(choice.get("logprobs"), dict) else []
    if len(lps) != len(ids) or not all(isinstance(x, dict) and isinstance(x.get("logprob"), (int, float))
                                       for x in lps):
        raise ValueError(f"server reply has {len(lps)} logprobs for {len(ids)} tokens")
    calls = choice["message"].get("tool_calls") or []
    if not isinstance(calls, list):
        raise ValueError("server reply: tool_calls is not a list")
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or \
                not isinstance(fn.get("arguments", ""), (str, dict)):
            raise ValueError(f"server reply: malformed tool call {json.dumps(c)[:200]}")
        if not isinstance(c.get("id"), str) or not c["id"]:
            c["id"] = f"call_{uuid.uuid4().hex[:24]}"          # the harness pairs results with calls by id
        if isinstance(fn.get("arguments"), dict):
            fn["arguments"] = json.dumps(fn["arguments"])
        fn.setdefault("arguments", "")
    content = choice["message"].get("content")
    msg = {"role": "assistant", "content": content if isinstance(content, str) else None, "tool_calls": list(calls)}
    return choice, msg, choice.get("finish_reason") or "stop"


# ----------------------------------------------------------------------------- one rollout

async def run_rollout(r: Rollout, harness, proxy: Proxy, root, *, max_tokens, context, timeout=None, keep=False,
                      sandbox="auto", wall=WALL):
    """Run one rollout to the end: sandbox, harness, verifier. Never raises for the rollout's own failures (they go
    to r.errors / r.failure / r.score None); the reward is the pool owner's to decide, once. timeout: the agent's
    budget of its own seconds (default: the task's), `wall` x that in wall time at most (_agent_clock)."""
    root = Path(root).resolve()           # absolute: bwrap mounts and the guard judge real paths
    box = root / r.id
    work, home, tmp = box / "work", box / "home", box / "tmp"
    proc = socket_server = bounds = container = harbor = None
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
        if not ok:
            r.errors.append(f"harness: {why}; log: {_tail(box / 'harness.log')}")
            r.failure = r.failure or ("timeout" if r.timed_out else "harness")
        out = "" if stopped else r.final_message
        if r.errors:
            r.score, r.reason = None, r.errors[0]
        elif harbor is not None:
            res = await harbor.verify(out)
        elif container is not None:
            res = await asyncio.to_thread(containers.verify, r.task, container, out)
        else:
            res = await asyncio.to_thread(taskenv.verify, r.task, work, agent_output=out, sandbox=sandbox, hide=[root])
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
                      "timed_out": r.timed_out, "aux_requests": r.aux_requests, "guard_context": r.guard_context,
                      "seconds": round(r.finished - r.started, 3)}}


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
