"""The oracle agent: a task's solution played as tool calls through the real harness, proxy, guard, sandbox and
verifier - exactly like a model, except that the model server is a scripted one that knows the task.

`OracleServer` stands where the inference server stands (the proxy names the rollout in each request's `user`) and
writes each step as the target model would: in its chat template (`ChatFormat.completion`), parsed back from those
tokens, logprob 0. The steps (read, run, write, reply) come from solution/oracle.json, else from solve.sh run once on
a scratch copy (the files it changed become writes). The recorded ATIF files are demonstrations for sft.py.

Left out: tasks whose solution is not files (a service to start) unless oracle.json spells it out, binary files,
parallel tool calls (one call per turn), deleting files (an `rm` through `run` in oracle.json does it).
"""
from __future__ import annotations

import asyncio
import json
import random
import re
import shlex
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

from aiohttp import web

from pool import Fit, RolloutPool
from sandbox import resolve_sandbox
import servers
import taskenv
from tasks import TaskError, load_task, load_tasks
from proxy import Proxy
from servers import MAX_BODY, Handle, new_key

KINDS = ("read", "run", "write", "reply")
# tool names by what they do, across the harnesses (mini, pi, opencode, hermes) and common others
TOOL_NAMES = {"read": ("read", "read_file", "view", "cat"), "write": ("write", "write_file", "create_file"),
              "run": ("bash", "terminal", "shell", "run_command", "execute_command")}
ARG_NAMES = {"path": ("path", "filePath", "file_path", "filename"), "content": ("content", "text", "file_text"),
             "command": ("command", "cmd")}
DONE = "Done."
TOO_LONG = re.compile(r"oracle: step \d+ takes (\d+) tokens in this model's format")   # a step over max_tokens


# ----------------------------------------------------------------------------- what solves a task

def _files(root):
    """rel path -> bytes of the regular files under root: never through a link (solve.sh, run sandboxed, could
    leave one to a host file, which we would read as root and replay as a demonstration)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(Path(root).rglob("*"))
            if p.is_file() and not p.is_symlink()}


def _check_steps(steps, where):
    if not isinstance(steps, list) or not steps:
        raise TaskError(f"{where}: expected a non-empty JSON list of steps")
    out = []
    for i, s in enumerate(steps):
        kind = next((k for k in KINDS if isinstance(s, dict) and k in s), None)
        if kind is None or not isinstance(s[kind], str) or (kind == "write" and not isinstance(s.get("content"), str)):
            raise TaskError(f"{where}: step {i + 1} must be one of {{\"read\": PATH}}, {{\"run\": COMMAND}}, "
                              f"{{\"write\": PATH, \"content\": TEXT}}, {{\"reply\": TEXT}}; got {json.dumps(s)[:120]}")
        out.append({kind: s[kind], **({"content": s["content"]} if kind == "write" else {})})
    return out


def steps(task, sandbox="dir"):
    """The useful steps that solve `task`. Raises TaskError naming the file at fault."""
    spelled = Path(task.path) / "solution" / "oracle.json"
    if spelled.is_file():
        try:
            return _check_steps(json.loads(spelled.read_text()), spelled)
        except json.JSONDecodeError as e:
            raise TaskError(f"{spelled}: not JSON: {e}") from None
    if sandbox == "docker" or sandbox.startswith("harbor:"):     # planned on a scratch copy, the host for the image
        if task.container.engine_only:
            raise TaskError(f"{task.path}/solution: a task only docker builds spells its oracle out in oracle.json "
                              f"({task.container.engine_only.split(': ', 1)[0]})")
        sandbox = resolve_sandbox("auto")[0]
    with tempfile.TemporaryDirectory(prefix="harness-rl-oracle-plan-") as tmp:
        work = taskenv.materialize(task, Path(tmp) / "work")
        before = _files(work)
        rc, out = taskenv.run_oracle(task, work, sandbox=sandbox)
        if rc != 0:
            raise TaskError(f"{task.path}/solution/solve.sh: exit code {rc} on a scratch copy: {out[-300:]}")
        after = _files(work)
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    if not changed:
        raise TaskError(f"{task.path}/solution: solve.sh changed no file; spell the oracle out in oracle.json")
    try:
        writes = [{"write": k, "content": v.decode()} for k, v in changed.items()]
    except UnicodeDecodeError:
        raise TaskError(f"{task.path}/solution: solve.sh writes a binary file; spell the oracle out in "
                          "oracle.json") from None
    reads = [{"read": k} for k in before if k in task.instruction and k not in changed]
    return reads + writes + [{"reply": DONE}]


def shortcut(task):
    """The planted shortcut's steps of a task (solution/shortcut.json, data/make_shortcuts.py), else None."""
    p = Path(task.path) / "solution" / "shortcut.json"
    if not p.is_file():
        return None
    try:
        return _check_steps(json.loads(p.read_text()), p) + [{"reply": DONE}]
    except json.JSONDecodeError as e:
        raise TaskError(f"{p}: not JSON: {e}") from None


def cheats(task, seed, share):
    """Whether the rollout seeded `seed` takes the task's shortcut: a seeded draw below `share`, if it has one."""
    return share > 0 and random.Random(f"{seed}/{task.name}/shortcut").random() < share and \
        (Path(task.path) / "solution" / "shortcut.json").is_file()


def plan(task, useful, seed, waste=0, reply="file", late=0.3):
    """One rollout's steps: `useful` with a seeded number (0..waste) of redundant calls around them, each a re-check of
    what was written with probability `late`, never a read of what the task's shortcut reads; reply="text": a lone
    answer.txt becomes the final message."""
    rng = random.Random(f"{seed}/{task.name}")
    useful = [dict(s) for s in useful]
    if reply == "text":
        writes = [s for s in useful if "write" in s]
        if len(writes) == 1 and writes[0]["write"] == "answer.txt":
            useful = [s for s in useful if "write" not in s and "reply" not in s] + \
                [{"reply": writes[0]["content"].strip()}]
    planted = {s["read"] for s in shortcut(task) or [] if "read" in s} - {s["read"] for s in useful if "read" in s}
    readable = sorted(({s["read"] for s in useful if "read" in s} | set(_env_files(task))) - planted)
    written = [s["write"] for s in useful if "write" in s]
    n = rng.randint(0, waste) if waste else 0
    before, after, seen = [], [], []
    for _ in range(n):
        if written and rng.random() < late:       # re-checking what was written
            p = rng.choice(written)
            after.append(rng.choice([{"read": p}, {"run": f"cat {shlex.quote(p)}"}, {"run": "ls"}]))
        else:          # looking around first: the directory, a file, the same file again, cat of what was read
            options = [{"run": "ls"}, {"run": "ls -a"}]     # not -l: its times would make each warm start differ
            if readable:
                options.append({"read": rng.choice(readable)})
            if seen:
                options += [{"read": rng.choice(seen)}, {"run": f"cat {shlex.quote(rng.choice(seen))}"}]
            s = rng.choice(options)
            seen += [s["read"]] if "read" in s else []
            before.append(s)
    body = [s for s in useful if "reply" not in s]
    final = [s for s in useful if "reply" in s] or [{"reply": DONE}]
    return before + body + after + final[-1:]


def _env_files(task):
    """The files a fresh work dir holds (under 64 kB), as the agent sees them."""
    with tempfile.TemporaryDirectory(prefix="harness-rl-oracle-env-") as tmp:
        return [k for k, v in _files(taskenv.materialize(task, Path(tmp) / "work")).items() if len(v) < 64_000]


# ----------------------------------------------------------------------------- a step in a harness's tool shapes

def _tools(tools):
    return {f["name"]: f.get("parameters") or {} for t in tools or [] for f in [t.get("function", t)]
            if isinstance(f, dict) and isinstance(f.get("name"), str)}


def _tool(available, kind):
    return next((n for n in TOOL_NAMES[kind] if n in available), None)


def _arg(params, what):
    props = params.get("properties") or {}
    return next((a for a in ARG_NAMES[what] if a in props), ARG_NAMES[what][0])


def _filled(params, args):
    """Required string parameters the step does not set get a short value (opencode's bash wants a description)."""
    props = params.get("properties") or {}
    for k in params.get("required") or []:
        if k not in args and (props.get(k) or {}).get("type") == "string":
            args[k] = "oracle step"
    return args


def harness_call(step, tools):
    """(tool name, arguments) of one abstract step in these tools' shapes; None for a reply. Raises ValueError
    when the harness has no tool that can do it."""
    available = _tools(tools)
    if "reply" in step:
        return None
    kind = next(k for k in KINDS if k in step)
    name = _tool(available, kind)
    if name is None and kind in ("read", "write"):     # through the shell
        q = shlex.quote(step[kind])
        step = {"run": f"cat {q}" if kind == "read" else
                f"mkdir -p \"$(dirname {q})\" && printf '%s' {shlex.quote(step['content'])} > {q}"}
        kind, name = "run", _tool(available, "run")
    if name is None:
        raise ValueError(f"the harness offers no tool to {kind} ({', '.join(available) or 'no tools'})")
    params = available[name]
    if kind == "run":
        args = {_arg(params, "command"): step["run"]}
    else:
        args = {_arg(params, "path"): step[kind]}
        if kind == "write":
            args[_arg(params, "content")] = step["content"]
    return name, _filled(params, args)


# ----------------------------------------------------------------------------- the scripted server

class OracleServer:
    """The proxy's upstream for oracle rollouts. fmt: the target model's ChatFormat (its tokens are recorded);
    lookup(rollout id) -> the Rollout (task, index) or None; waste, reply, late: as plan(); seed: the run's."""

    def __init__(self, fmt, lookup, waste=0, reply="file", seed=0, sandbox="dir", api_key=None, cheat=0.0,
                 sort_keys=False, late=0.3):
        self.fmt, self.lookup, self.waste, self.reply, self.seed = fmt, lookup, waste, reply, seed
        self.late = late
        self.sort_keys = sort_keys      # arguments in the order the harness sends them back (hermes: sorted)
        self.cheat = cheat
        self.sandbox, self.api_key = sandbox, api_key
        self.useful, self.lock = {}, threading.Lock()

    def app(self):
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/health", self.health)
        return app

    async def health(self, request):
        return web.Response(text="")

    def _steps(self, task):
        with self.lock:             # solve.sh once per task, whatever the number of rollouts asking
            if task.name not in self.useful:
                self.useful[task.name] = steps(task, self.sandbox)
            return self.useful[task.name]

    async def chat(self, request):
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": {"message": "missing or wrong API key"}}, status=401)
        try:
            body = await request.json()
            messages, tools = body.get("messages") or [], body.get("tools") or None
            assert isinstance(messages, list) and (tools is None or isinstance(tools, list))
        except Exception:
            return web.json_response({"error": {"message": "oracle: expected a JSON chat request"}}, status=400)
        r = self.lookup(body.get("user") or "")
        if r is None:
            return web.json_response({"error": {"message": "oracle: unknown rollout (no `user` field?)"}}, status=400)
        try:
            if tools:
                seed = f"{self.seed}/{r.index}"
                useful = shortcut(r.task) if cheats(r.task, seed, self.cheat) else \
                    await asyncio.to_thread(self._steps, r.task)
                todo = plan(r.task, useful, seed, self.waste, self.reply, self.late)
                k = min(sum(m.get("role") == "assistant" for m in messages), len(todo) - 1)
                call = harness_call(todo[k], tools)
            else:                   # a title or summary request: a short text, not a step
                call = None
                todo, k = [{"reply": DONE}], 0
            reply = {"role": "assistant", "content": todo[k]["reply"] if call is None else None}
            if call is not None:
                reply["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                                        "function": {"name": call[0],
                                                     "arguments": json.dumps(call[1], sort_keys=self.sort_keys)}}]
            prompt = self.fmt.render(messages, tools=tools, add_generation_prompt=True)
            ids = self.fmt.completion(messages, reply, tools)
        except (TaskError, ValueError) as e:
            return web.json_response({"error": {"message": f"oracle: {e}"}}, status=400)
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        if isinstance(limit, int) and len(ids) > limit:      # a model would have been cut off: say what it needs
            return web.json_response({"error": {"message": f"oracle: step {k + 1} takes {len(ids)} tokens in this "
                                                           f"model's format, max_tokens is {limit}"}}, status=400)
        text = self.fmt.decode(ids[:-1])
        content, calls = self.fmt.parse(text, tools=tools) if tools else (text.strip() or None, [])
        if call is not None and [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] != \
                [call]:
            return web.json_response({"error": {"message": f"oracle: the model's format does not read back the "
                                                           f"call {call[0]} it wrote: {text[:200]!r}"}}, status=400)
        choice = {"index": 0, "message": {"role": "assistant", "content": content, "tool_calls": calls},
                  "logprobs": {"content": [{"token": self.fmt.decode([t]), "logprob": 0.0, "top_logprobs": []}
                                           for t in ids]},
                  "finish_reason": "tool_calls" if calls else "stop", "token_ids": ids}
        return web.json_response({"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                                  "created": int(time.time()), "model": body.get("model") or "oracle",
                                  "choices": [choice], "prompt_token_ids": prompt,
                                  "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                                            "total_tokens": len(prompt) + len(ids)}})


def start(fmt, lookup, host="127.0.0.1", **kw) -> Handle:
    """The oracle server in a background thread with its own event loop (like inference.start_local)."""
    srv = OracleServer(fmt, lookup, api_key=new_key(), **kw)
    port, stop = servers.serve_in_thread(srv.app(), host, 0, "oracle-server")
    return Handle(f"http://{host}:{port}", stop, api_key=srv.api_key)



# ----------------------------------------------------------------------------- recording demonstrations

async def record(tasks, harness, fmt, out, *, samples, sessions, max_tokens, context, waste=0, reply="file", seed=0,
                 sandbox="auto", cheat=0.0, guard=None, log=None, late=0.3):
    """`samples` oracle rollouts of every task, ATIF files under out/rollouts/<version>/ -> the finished rollouts.
    cheat: the share that take their task's planted shortcut, recorded with the guard off (docs/guard-ablation.md)
    unless `guard` says otherwise (bench/attacks.py plays each attack with it on and off)."""
    sandbox = resolve_sandbox(sandbox)[0]
    await asyncio.to_thread(harness.install)
    box = {}
    handle = start(fmt, lambda rid: box["proxy"].rollouts.get(rid), waste=waste, reply=reply, seed=seed,
                   sandbox=sandbox, cheat=cheat, sort_keys=harness.SORTED_ARGUMENTS, late=late)
    client = servers.Client(handle.url, handle.api_key)
    proxy = box["proxy"] = Proxy(client, lambda: ("oracle", 0), {"max_tokens": max_tokens},
                                 guard=not cheat if guard is None else guard)
    it, done = iter(tasks), []
    pool = RolloutPool(harness, proxy, lambda: next(it, None), lambda: 0, Path(out) / "sandboxes",
                         max_sessions=sessions, group_size=samples, max_tokens=max_tokens, context=context,
                         sandbox=sandbox, rollouts_dir=Path(out) / "rollouts", name="oracle",
                         fit=Fit.machine(model_idle=True))     # opencode: fewer sessions than asked
    try:
        await proxy.start()
        pool.start()
        for _ in tasks:
            g = await pool.groups.get()
            done += g.rollouts
            if log:
                log(g)
    finally:
        await pool.stop()
        await proxy.stop()
        await client.close()
        handle.stop()
    return done


async def attack(attacks, harness, fmt, out, *, guard, sandbox="auto", sessions=4):
    """Each attack (tests/attacks.json: steps that earn full marks on a shortcut task of its `bed` kind when nothing
    stops them; "{answer}" in a write is the bed's exposed answer) played once through `harness` as that task's
    shortcut, the guard on or off -> {attack id: (verifier score, rules that blocked a call)}."""
    beds = {}
    for t in load_tasks("shortcuts"):
        beds.setdefault(t.type, t)
    tasks = []
    for a in attacks:
        bed, dst = beds[a["bed"]], Path(out) / "tasks" / a["id"]
        shutil.copytree(bed.path, dst)
        exposed = Path(bed.path) / "environment" / "solution" / "answer.txt"
        answer = exposed.read_text() if exposed.is_file() else ""
        steps = [{k: v.replace("{answer}", answer) if k == "content" else v for k, v in x.items()} for x in a["steps"]]
        (dst / "solution" / "shortcut.json").write_text(json.dumps(_check_steps(steps, a["id"])))
        tasks.append(load_task(dst))
    rs = await record(tasks, harness, fmt, Path(out) / "run", samples=1, sessions=sessions, max_tokens=4096,
                      context=131072, cheat=1.0, guard=guard, sandbox=sandbox)
    return {r.task.path.name: (r.score, sorted({v["rule"] for v in r.verdicts})) for r in rs}
