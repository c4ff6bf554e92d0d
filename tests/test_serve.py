"""inference.py and serve.py: the embedded server speaks vLLM's protocol; batching, adapters, errors; the vLLM launcher."""
import asyncio
import collections
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest
import torch

import checkpoint
import engine as E
import grpo
import lora
import inference
import servers
import tiny
from chat import ChatFormat
from conftest import free_port, generate, train_scripted_adapter
from recipe import effective_config, recipe_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
ASK = [{"role": "user", "content": "List the files."}]
CALL = '<|tool_call_start|>[bash(command="ls -la")]<|tool_call_end|>'


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """One embedded server on the tiny LFM2 checkpoint, with a scripted adapter that answers a tool call
    and a random one; plus a plain copy of the model for reference forwards."""
    tmp = tmp_path_factory.mktemp("serve")
    ckpt = tiny.write_tiny_checkpoint(tmp / "ckpt", "lfm2", seed=0)
    scripted = train_scripted_adapter(ckpt, ASK, CALL, tmp / "scripted", tools=TOOLS)
    ref = checkpoint.load_model(ckpt, dtype=torch.float32, device="cpu")
    lora.add_lora(ref, rank=4, alpha=32, adapters=("rand",), seed=1)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)      # the same "random" adapter every run
        for p in lora.lora_parameters(ref, "rand"):
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    rand = lora.save_adapter(ref, tmp / "rand", adapter="rand")
    h = inference.start_local(ckpt, port=free_port(), name="tiny", dtype=torch.float32, device="cpu", api_key=None)
    yield {"url": h.url, "ckpt": ckpt, "scripted": scripted, "rand": rand, "ref": ref, "tmp": tmp,
           "fmt": ChatFormat.from_checkpoint(ckpt), "engine": h.server.engine}
    h.stop()


def run(coro):
    return asyncio.run(coro)


async def post(url, path, body, raw=False):
    async with aiohttp.ClientSession() as s:
        async with s.post(url + path, data=body if raw else json.dumps(body)) as r:
            text = await r.text()
            return r.status, (json.loads(text) if r.content_type == "application/json" else text)


async def get(url, path):
    async with aiohttp.ClientSession() as s:
        async with s.get(url + path) as r:
            return r.status, await r.json()


async def stream(url, body):
    chunks = []
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/chat/completions", json={**body, "stream": True}) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            async for line in r.content:
                line = line.decode().strip()
                if line.startswith("data: "):
                    chunks.append(line[6:])
    assert chunks[-1] == "[DONE]"
    return [json.loads(c) for c in chunks[:-1]]


def load(env, name, path, **kw):
    return run(post(env["url"], "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path), **kw}))


# ----------------------------------------------------------------------------- protocol

def test_chat_response_has_vllms_shape(env):
    status, r = run(post(env["url"], "/v1/chat/completions", {
        "model": "tiny", "messages": ASK, "max_tokens": 6, "logprobs": True, "top_logprobs": 0,
        "return_token_ids": True, "seed": 1}))
    assert status == 200 and r["object"] == "chat.completion" and r["model"] == "tiny"
    c = r["choices"][0]
    assert c["message"]["role"] == "assistant" and c["finish_reason"] in ("stop", "length")
    assert len(c["token_ids"]) == len(c["logprobs"]["content"]) == r["usage"]["completion_tokens"] <= 6
    assert r["prompt_token_ids"] == env["fmt"].render(ASK) and r["usage"]["prompt_tokens"] == len(r["prompt_token_ids"])
    assert all(isinstance(x["logprob"], float) and x["logprob"] <= 0 for x in c["logprobs"]["content"])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_a_fresh_forward(env, temperature):
    status, r = run(post(env["url"], "/v1/chat/completions", {
        "messages": ASK, "max_tokens": 12, "temperature": temperature, "logprobs": True,
        "return_token_ids": True, "seed": 7}))
    prompt, out = r["prompt_token_ids"], r["choices"][0]["token_ids"]
    lora.set_adapter(env["ref"], None)
    with torch.no_grad():
        logits = env["ref"](torch.tensor([prompt + out]))[0, len(prompt) - 1:-1] / temperature
    want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out)[:, None])[:, 0]
    got = torch.tensor([x["logprob"] for x in r["choices"][0]["logprobs"]["content"]])
    assert (got - want).abs().max() <= 1e-4


def test_scripted_adapter_answers_a_parsed_tool_call(env):
    assert load(env, "scripted", env["scripted"])[0] == 200
    body = {"model": "scripted", "messages": ASK, "tools": TOOLS, "temperature": 0, "return_token_ids": True,
            "logprobs": True, "max_tokens": 40}
    status, r = run(post(env["url"], "/v1/chat/completions", body))
    c = r["choices"][0]
    assert status == 200 and c["finish_reason"] == "tool_calls"
    (call,) = c["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"command": "ls -la"} and call["id"]
    # the same request streamed: same tokens, logprobs, content and tool call
    chunks = run(stream(env["url"], body))
    deltas = [ch["choices"][0] for ch in chunks if ch["choices"]]
    assert deltas[0]["delta"]["role"] == "assistant"
    assert sum((d.get("token_ids") or [] for d in deltas), []) == c["token_ids"]
    lps = [x["logprob"] for d in deltas if d["logprobs"] for x in d["logprobs"]["content"]]
    assert lps == pytest.approx([x["logprob"] for x in c["logprobs"]["content"]], abs=1e-6)
    calls = [t for d in deltas for t in d["delta"].get("tool_calls", [])]
    assert [(t["function"]["name"], json.loads(t["function"]["arguments"])) for t in calls] == [("bash", {"command": "ls -la"})]
    assert "".join(d["delta"].get("content") or "" for d in deltas) == (c["message"]["content"] or "")
    assert deltas[-1]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"]["completion_tokens"] == len(c["token_ids"])


def test_streamed_and_plain_answers_agree(env):
    body = {"messages": ASK, "max_tokens": 10, "seed": 3, "logprobs": True, "return_token_ids": True}
    _, plain = run(post(env["url"], "/v1/chat/completions", body))
    chunks = run(stream(env["url"], body))
    deltas = [ch["choices"][0] for ch in chunks if ch["choices"]]
    assert chunks[0]["prompt_token_ids"] == plain["prompt_token_ids"]
    assert sum((d.get("token_ids") or [] for d in deltas), []) == plain["choices"][0]["token_ids"]
    assert "".join(d["delta"].get("content") or "" for d in deltas) == (plain["choices"][0]["message"]["content"] or "")
    assert deltas[-1]["finish_reason"] == plain["choices"][0]["finish_reason"]


def test_completions_take_token_ids(env):
    prompt = env["fmt"].render(ASK)
    status, r = run(post(env["url"], "/v1/completions", {"prompt": prompt, "max_tokens": 5, "temperature": 0,
                                                         "return_token_ids": True, "logprobs": True}))
    c = r["choices"][0]
    assert status == 200 and c["prompt_token_ids"] == prompt and len(c["token_ids"]) == 5
    lora.set_adapter(env["ref"], None)
    greedy, _ = generate(env["ref"], prompt, max_new_tokens=5, temperature=0)
    assert c["token_ids"] == greedy


# ----------------------------------------------------------------------------- adapters and batching

def test_models_lists_base_and_adapters_with_parent(env):
    load(env, "rand-list", env["rand"])

    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.get(env["url"] + "/v1/models") as r:
                return await r.json()
    data = run(go())["data"]
    assert data[0]["id"] == "tiny" and data[0]["parent"] is None
    assert {"id": "rand-list", "parent": "tiny"}.items() <= next(d for d in data if d["id"] == "rand-list").items()


def test_hot_loaded_adapter_changes_answers_and_unloaded_one_is_refused(env):
    body = {"messages": ASK, "max_tokens": 8, "temperature": 0, "return_token_ids": True}
    base = run(post(env["url"], "/v1/chat/completions", body))[1]["choices"][0]["token_ids"]
    assert load(env, "hot", env["rand"])[0] == 200
    assert load(env, "hot", env["rand"])[0] == 400                      # reused name without load_inplace
    assert load(env, "hot", env["rand"], load_inplace=True)[0] == 200
    hot = run(post(env["url"], "/v1/chat/completions", {**body, "model": "hot"}))[1]["choices"][0]["token_ids"]
    assert hot != base
    assert run(post(env["url"], "/v1/unload_lora_adapter", {"lora_name": "hot"}))[0] == 200
    status, err = run(post(env["url"], "/v1/chat/completions", {**body, "model": "hot"}))
    assert status == 404 and "hot" in err["message"]
    assert run(post(env["url"], "/v1/unload_lora_adapter", {"lora_name": "hot"}))[0] == 404
    assert load(env, "bad", env["tmp"])[0] == 400                       # not an adapter directory


def test_multi_adapter_batch_equals_one_request_at_a_time(env):
    load(env, "ra", env["rand"])
    load(env, "sc", env["scripted"])
    reqs = [{"model": m, "messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 10,
             "seed": i, "temperature": 0.9, "logprobs": True, "return_token_ids": True}
            for i, m in enumerate(["ra", "tiny", "sc", "ra", "tiny", "sc"])]

    async def together():
        return await asyncio.gather(*(post(env["url"], "/v1/chat/completions", b) for b in reqs))
    batched = run(together())
    for b, (status, r) in zip(reqs, batched):
        status1, alone = run(post(env["url"], "/v1/chat/completions", b))
        assert status == status1 == 200
        assert r["choices"][0]["token_ids"] == alone["choices"][0]["token_ids"]
        got = [x["logprob"] for x in r["choices"][0]["logprobs"]["content"]]
        want = [x["logprob"] for x in alone["choices"][0]["logprobs"]["content"]]
        assert got == pytest.approx(want, abs=1e-4)


def test_a_repeated_prompt_is_prefilled_once_and_sampled_per_request(env):
    """A GRPO group's 8 rollouts send the same first prompt: one prefill, 8 independent samples, each with
    the logprobs of a fresh forward."""
    ask = [{"role": "user", "content": "the same prompt for a whole group"}]
    hits = env["engine"].prompt_hits
    body = {"messages": ask, "max_tokens": 8, "temperature": 3.0, "logprobs": True, "return_token_ids": True}

    async def group():
        return await asyncio.gather(*(post(env["url"], "/v1/chat/completions", {**body, "seed": i})
                                      for i in range(8)))
    rs = [r for _, r in run(group())]
    assert env["engine"].prompt_hits - hits == 7
    # what is kept per prompt: its cache and the last position's logits - not a view of all [T, V] logits
    assert all(lg.dim() == 1 and lg._base is None for _, lg in env["engine"].prompts.values())
    e = env["engine"]
    assert e.prompt_tokens == sum(c.cap for c, _ in e.prompts.values()) <= e.prompt_cache_tokens

    outs = [r["choices"][0]["token_ids"] for r in rs]
    assert len({tuple(o) for o in outs}) > 1                          # each request samples on its own
    lora.set_adapter(env["ref"], None)
    for r, out in zip(rs, outs):
        prompt = r["prompt_token_ids"]
        with torch.no_grad():
            logits = env["ref"](torch.tensor([prompt + out]))[0, len(prompt) - 1:-1] / 3.0
        want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out)[:, None])[:, 0]
        got = torch.tensor([x["logprob"] for x in r["choices"][0]["logprobs"]["content"]])
        assert (got - want).abs().max() <= 1e-4


def _processed(logits, temperature, top_p, top_k):
    """The distribution vLLM samples from, written out plainly for one row: temperature, then top-k (ties kept),
    then the smallest prefix of the sorted probabilities reaching top_p."""
    p = torch.softmax(logits.double() / temperature, -1)
    if 0 < top_k < len(p):
        p = torch.where(p >= p.sort(descending=True).values[top_k - 1], p, 0.0)
        p = p / p.sum()
    order, keep = p.argsort(descending=True).tolist(), set()
    total = 0.0
    for i in order:
        if total >= top_p:
            break
        keep.add(i)
        total += float(p[i])
    p = torch.tensor([float(p[i]) if i in keep else 0.0 for i in range(len(p))], dtype=torch.float64)
    return p / p.sum()


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (0.7, 1.0, 0), (1.3, 0.8, 0), (1.0, 1.0, 3),
                                                     (0.8, 0.9, 4)])
def test_batched_sampler_draws_the_processed_distribution(temperature, top_p, top_k):
    """engine.sample (inverse-CDF at a hashed uniform, one batched pass): 20 000 seeded draws of one row follow the
    processed distribution (chi-square), and each returned logprob is that distribution's at the token drawn."""
    logits = torch.tensor([2.0, 1.5, 0.3, 0.0, -0.5, -1.0, -3.0, 1.0])
    n = 20_000
    want = _processed(logits, temperature, top_p, top_k)
    tok, lp = E.sample(logits.expand(n, -1), [temperature] * n, [top_p] * n, [top_k] * n, list(range(n)), [7] * n)
    counts = torch.bincount(tok, minlength=len(logits)).double()
    assert counts[want == 0].sum() == 0, (counts, want)          # nothing outside top-k / top-p
    live = want > 0
    chi2 = float(((counts[live] - n * want[live]) ** 2 / (n * want[live])).sum())
    assert chi2 < 30, (chi2, counts / n, want)                  # <= 7 degrees of freedom: p < 1e-4 to fail
    assert torch.allclose(lp.double(), want[tok].log(), atol=1e-5)


def test_batched_sampler_rows_are_their_own():
    """A row's draw depends on its seed and step only - not on the batch around it (continuous batching and
    preemption change that) - and greedy rows take the argmax with the plain softmax's logprob."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 300, generator=g)
    args = ([1.0, 0.7, 0.0, 1.0, 1.2], [1.0, 0.9, 0.5, 1.0, 0.95], [0, 0, 5, 50, 0], [11, 12, 13, 11, -4], [0, 3, 9, 1, 2])
    tok, lp = E.sample(logits, *args)
    for i in range(5):
        one = E.sample(logits[i:i + 1], *([a[i]] for a in args))
        assert one[0].item() == tok[i].item() and abs(one[1].item() - lp[i].item()) < 1e-6, i
    assert tok[2] == logits[2].argmax() and abs(lp[2] - torch.log_softmax(logits[2], -1).max()) < 1e-6
    again = E.sample(logits, *args)
    assert torch.equal(again[0], tok)                              # seeded: the same draw
    steps = E.sample(logits[0].expand(64, -1), [1.0] * 64, [1.0] * 64, [0] * 64, [11] * 64, list(range(64)))[0]
    seeds = E.sample(logits[0].expand(64, -1), [1.0] * 64, [1.0] * 64, [0] * 64, list(range(64)), [0] * 64)[0]
    assert len(set(steps.tolist())) > 20 and len(set(seeds.tolist())) > 20    # steps and seeds draw apart


def test_stored_prompts_stay_under_their_token_bound():
    e = inference.Engine.__new__(inference.Engine)          # only the bookkeeping: no model, no thread
    e.prompts, e.prompt_cache_tokens, e.prompt_tokens, e.ring_positions = collections.OrderedDict(), 10, 0, 0
    for i in range(50):
        e._remember(("a", tuple(range(i, i + 3))), None, None)
    assert e.prompt_tokens == 9 == sum(len(k[1]) for k in e.prompts) and len(e.prompts) == 3
    e._remember(("a", tuple(range(11))), None, None)          # longer than the bound: not kept
    e.forget("a")
    assert e.prompt_tokens == 0 and not e.prompts
    big = type("C", (), {"cap": 8})()                          # a 2-token prompt whose cache holds 8 slots
    e._remember(("a", (1, 2)), big, None)
    e._remember(("a", (3, 4)), big, None)                      # 16 slots > 10: the first one goes
    assert list(e.prompts) == [("a", (3, 4))] and e.prompt_tokens == 8
    e.forget("a")
    e.ring_positions = 3                                        # sliding layers' rings: 3 positions' worth a prompt
    for i in range(5):
        e._remember(("a", (i, i + 1)), None, None)
    assert e.prompt_tokens == 10 == 2 * (2 + 3) and len(e.prompts) == 2


def test_new_weights_under_an_old_name_are_not_answered_from_stored_prompts(env):
    body = {"messages": ASK, "max_tokens": 8, "temperature": 0, "return_token_ids": True}
    answer = lambda m: run(post(env["url"], "/v1/chat/completions", {**body, "model": m}))[1]["choices"][0]["token_ids"]  # noqa
    load(env, "fresh-scripted", env["scripted"])
    want = answer("fresh-scripted")
    load(env, "swap", env["rand"])
    before = answer("swap")
    assert load(env, "swap", env["scripted"], load_inplace=True)[0] == 200
    assert answer("swap") == want != before
    run(post(env["url"], "/v1/unload_lora_adapter", {"lora_name": "swap"}))
    assert not [k for k in env["engine"].prompts if k[0] == "swap"]


def test_48_concurrent_streaming_sessions_complete(env, monkeypatch):
    """... and the engine hands their tokens to the server's event loop a step at a time, not one wake-up each."""
    handed = collections.Counter()

    def put_all(items):
        handed.update(calls=1, events=len(items))
        put(items)
    put = E._put_all
    monkeypatch.setattr(E, "_put_all", put_all)

    async def go():
        return await asyncio.gather(*(stream(env["url"], {"messages": [{"role": "user", "content": f"s{i}"}],
                                                          "max_tokens": 16, "seed": i}) for i in range(48)))
    results = run(go())
    assert len(results) == 48
    assert all(r[-1]["usage"]["completion_tokens"] >= 1 for r in results)
    tokens = sum(r[-1]["usage"]["completion_tokens"] for r in results)
    assert handed["events"] >= tokens + 48             # every token and every end went through
    assert handed["calls"] * 4 < handed["events"], handed


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("body,status,needle", [
    ("{not json", 400, "not valid JSON"),
    (json.dumps({"messages": ASK, "temprature": 1}), 400, "unknown field 'temprature'"),
    (json.dumps({"messages": ASK, "max_tokens": "5"}), 400, "field 'max_tokens'"),
    (json.dumps({"messages": ASK, "stream": 1}), 400, "field 'stream'"),
    (json.dumps({"messages": "hi"}), 400, "field 'messages'"),
    (json.dumps({"messages": ASK, "n": 2}), 400, "'n'"),
    (json.dumps({"messages": ASK, "max_tokens": 10**6}), 400, "maximum context length"),
    (json.dumps({"messages": [{"role": "user", "content": "x" * 40000}]}), 400, "maximum context length"),
    (json.dumps({"messages": ASK, "model": "nope"}), 404, "does not exist"),
    (json.dumps([1, 2]), 400, "JSON object"),
    # a red team's inputs: each a 400 naming the field, as vLLM - not a 500, nor a dead engine thread (a 200
    # /health and every later request hanging)
    ('{"messages": %s, "temperature": NaN}' % json.dumps(ASK), 400, "temperature"),
    ('{"messages": %s, "temperature": Infinity}' % json.dumps(ASK), 400, "temperature"),
    ('{"messages": %s, "top_p": NaN}' % json.dumps(ASK), 400, "top_p"),
    (json.dumps({"messages": ASK, "seed": 2**63}), 400, "seed"),
    (json.dumps({"messages": ASK, "max_tokens": 0}), 400, "max_tokens must be at least 1"),
    (json.dumps({"messages": ASK, "max_completion_tokens": 0, "max_tokens": 5}), 400, "at least 1"),
])
def test_bad_requests_get_a_clear_error_and_the_server_keeps_serving(env, body, status, needle):
    got, err = run(post(env["url"], "/v1/chat/completions", body, raw=True))
    assert got == status and needle in err["message"], err
    assert run(post(env["url"], "/v1/chat/completions", {"messages": ASK, "max_tokens": 2}))[0] == 200


def test_oversize_body_is_a_400(env):
    got, err = run(post(env["url"], "/v1/chat/completions", "x" * (inference.MAX_BODY + 10), raw=True))
    assert got == 400 and "exceeds" in err["message"]


def test_completions_token_ids_out_of_range(env):
    got, err = run(post(env["url"], "/v1/completions", {"prompt": [1, 10**7], "max_tokens": 2}))
    assert got == 400 and "token ids" in err["message"]


# ----------------------------------------------------------------------------- vLLM launcher

FAKE_VLLM = """#!{python}
import http.server, json, os, sys
open(os.environ["FAKE_VLLM_OUT"], "w").write(json.dumps({{"argv": sys.argv[1:],
    "lora_updating": os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING")}}))
print("fake vllm starting", flush=True)
if os.environ.get("FAKE_VLLM_CRASH"):
    print("RuntimeError: CUDA out of memory (fake)", flush=True)
    sys.exit(3)
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "vllm"
    exe.write_text(FAKE_VLLM.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_VLLM_OUT", str(tmp_path / "argv.json"))
    return tmp_path


def test_vllm_command_has_the_documented_flags(tmp_path):
    ckpt = tiny.write_tiny_checkpoint(tmp_path / "ckpt", "lfm2")
    cmd, env = servers.vllm_command(ckpt, 8123, rank=32, max_loras=3 * grpo.live_versions(4))   # 3 trainers
    assert cmd[:3] == ["vllm", "serve", str(ckpt)] and env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1"
    assert float(env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]) > 3 * servers.KEEP_ALIVE     # it never closes a connection we reuse
    flags = {cmd[i]: cmd[i + 1] for i in range(3, len(cmd) - 1)}
    assert "--enable-lora" in cmd and "--enable-auto-tool-choice" in cmd
    assert flags["--max-lora-rank"] == "32" and flags["--max-loras"] == str(3 * (4 + 2))
    assert flags["--logprobs-mode"] == "processed_logprobs" and flags["--generation-config"] == "vllm"
    assert flags["--tool-call-parser"] == "lfm2" and flags["--port"] == "8123"
    assert servers.vllm_command(ckpt, 1, rank=20)[0][servers.vllm_command(ckpt, 1, rank=20)[0].index("--max-lora-rank") + 1] == "32"
    lfm3 = tiny.write_tiny_checkpoint(tmp_path / "lfm3", "lfm3")
    with pytest.raises(ValueError, match="no LFM3"):
        servers.vllm_command(lfm3, 1)


def test_vllm_launcher_starts_waits_for_health_and_stops(fake_vllm):
    ckpt = tiny.write_tiny_checkpoint(fake_vllm / "ckpt", "lfm2")
    port = free_port()
    h = inference.start_server("vllm", ckpt, run_dir=fake_vllm / "run", port=port, health_timeout=30)
    try:
        seen = json.loads((fake_vllm / "argv.json").read_text())
        assert seen["lora_updating"] == "1" and "--enable-lora" in seen["argv"]
        assert servers.healthy(h.url) and h.api_key      # a key for every launched server
        assert inference.start_server(h.url + "/v1", ckpt).url == h.url      # connecting to a running server
    finally:
        h.stop()
    assert h.process.poll() is not None and not servers.healthy(h.url)
    assert "fake vllm starting" in (fake_vllm / "run" / "vllm.log").read_text()


def test_vllm_crash_reports_the_log_tail(fake_vllm, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_CRASH", "1")
    ckpt = tiny.write_tiny_checkpoint(fake_vllm / "ckpt", "lfm2")
    with pytest.raises(RuntimeError, match=r"exited with code 3(.|\n)*CUDA out of memory"):
        inference.start_server("vllm", ckpt, run_dir=fake_vllm / "run", port=free_port(), health_timeout=30)


def test_no_server_at_url_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no healthy server"):
        inference.start_server(f"http://127.0.0.1:{free_port()}", "unused")


def test_the_server_needs_its_key_on_every_route_however_spelled(tmp_path):
    """A sandboxed agent shares the trainer's loopback: without the key it must not sample, list or (un)load."""
    ckpt = tiny.write_tiny_checkpoint(tmp_path / "ckpt", "lfm2")
    h = inference.start_local(ckpt, port=free_port(), name="tiny", dtype=torch.float32, device="cpu")   # default: a new key
    assert h.api_key and h.api_key.startswith("hrl-") and h.api_key != servers.new_key()
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    async def go():
        out = {}
        async with aiohttp.ClientSession() as s:
            for label, key in (("none", None), ("wrong", "hrl-x"), ("right", h.api_key)):
                hdr = {"Authorization": f"Bearer {key}"} if key else {}
                for path, body in (("/v1/chat/completions", chat), ("/v1/chat/%63ompletions", chat),
                                   ("/v1/%6coad_lora_adapter", {"lora_name": "x", "lora_path": "/nonexistent"}),
                                   ("/v1/unload_lora_adapter", {"lora_name": "x"}), ("/%761/models", None),
                                   ("/v1/models", None), ("/health", None)):
                    req = s.post(h.url + path, json=body, headers=hdr) if body else s.get(h.url + path, headers=hdr)
                    async with req as r:
                        out[label, path] = r.status
        client = servers.Client(h.url, h.api_key)
        try:
            answer = await client.chat(chat)
        finally:
            await client.close()
        return out, answer
    try:
        out, answer = asyncio.run(go())
    finally:
        h.stop()
    for label in ("none", "wrong"):
        assert {p: c for (lab, p), c in out.items() if lab == label and p != "/health"} == {
            p: 401 for (lab, p) in out if lab == label and p != "/health"}, out
        assert out[label, "/health"] == 200             # liveness stays open, as in vLLM
    assert out["right", "/v1/chat/completions"] == 200 and out["right", "/v1/chat/%63ompletions"] == 200
    assert out["right", "/v1/%6coad_lora_adapter"] == 400 and out["right", "/v1/models"] == 200
    assert answer["choices"][0]["message"]["role"] == "assistant"
    cmd, env = servers.vllm_command(ckpt, 1, api_key="hrl-secret")
    assert env["VLLM_API_KEY"] == "hrl-secret" and "hrl-secret" not in " ".join(cmd)   # not on the command line



# ----------------------------------------------------------------------------- faults: the engine never wedges

def test_a_tiny_temperature_is_greedy_not_a_dead_engine(env):
    body = {"messages": ASK, "max_tokens": 4, "logprobs": True}
    got, low = run(post(env["url"], "/v1/chat/completions", {**body, "temperature": 1e-300}))
    _, greedy = run(post(env["url"], "/v1/chat/completions", {**body, "temperature": 0}))
    assert got == 200 and low["choices"][0]["message"] == greedy["choices"][0]["message"]


def test_a_diverged_adapter_fails_its_requests_not_the_server(env, tmp_path):
    """NaN weights (a diverged adapter in training) at temperature > 0: that request gets a clear error, and
    the base and other adapters keep answering."""
    m = checkpoint.load_model(env["ckpt"], dtype=torch.float32, device="cpu")
    lora.add_lora(m, rank=4, alpha=32, adapters=("nan",), seed=0)
    with torch.no_grad():
        for p in lora.lora_parameters(m, "nan"):
            p.fill_(float("nan"))
    assert load(env, "diverged", lora.save_adapter(m, tmp_path / "nan", adapter="nan"))[0] == 200
    got, err = run(post(env["url"], "/v1/chat/completions", {"model": "diverged", "messages": ASK, "max_tokens": 4,
                                                             "temperature": 1.0}))
    assert got == 500 and "non-finite logits" in err["message"] and "diverged" in err["message"]
    assert run(post(env["url"], "/v1/chat/completions", {"messages": ASK, "max_tokens": 4}))[0] == 200
    assert run(post(env["url"], "/v1/unload_lora_adapter", {"lora_name": "diverged"}))[0] == 200


def test_a_bad_in_place_load_leaves_the_old_adapter_serving_a_running_stream(env, tmp_path):
    """load_inplace of a file that does not fit, while a stream decodes with the adapter: 400 naming the
    problem, the old weights stay (listed and answering), the stream ends normally."""
    assert load(env, "live", env["rand"])[0] == 200
    bad = tmp_path / "bad"
    shutil.copytree(env["rand"], bad)
    cfg = json.loads((bad / "adapter_config.json").read_text())
    (bad / "adapter_config.json").write_text(json.dumps({**cfg, "r": cfg["r"] * 2}))      # shapes no longer fit
    alpha = tmp_path / "alpha"
    shutil.copytree(env["rand"], alpha)
    (alpha / "adapter_config.json").write_text(json.dumps({**cfg, "lora_alpha": "sixteen"}))
    body = {"model": "live", "messages": ASK, "max_tokens": 40, "temperature": 0, "logprobs": True}
    _, before = run(post(env["url"], "/v1/chat/completions", body))

    async def go():
        streaming = asyncio.create_task(stream(env["url"], body))
        await asyncio.sleep(0.05)
        bad_load = await post(env["url"], "/v1/load_lora_adapter", {"lora_name": "live", "lora_path": str(bad),
                                                                     "load_inplace": True})
        alpha_load = await post(env["url"], "/v1/load_lora_adapter", {"lora_name": "live", "lora_path": str(alpha),
                                                                       "load_inplace": True})
        return bad_load, alpha_load, await streaming
    (got, err), (got_a, err_a), chunks = run(go())
    assert got == 400 and "rank" in err["message"] and got_a == 400 and "lora_alpha" in err_a["message"]
    assert chunks[-1]["choices"] == [] or chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    _, models = run(get(env["url"], "/v1/models"))
    assert "live" in [c["id"] for c in models["data"]]
    _, after = run(post(env["url"], "/v1/chat/completions", body))
    assert after["choices"][0]["message"] == before["choices"][0]["message"]           # the old weights answer
    assert run(post(env["url"], "/v1/unload_lora_adapter", {"lora_name": "live"}))[0] == 200


def test_a_client_that_leaves_stops_its_decoding(env):
    """Non-streaming: aiohttp does not cancel the handler when its client goes away; the engine must still
    stop decoding for it (else shutdown waits for every abandoned request)."""
    engine = env["engine"]

    async def go():
        async with aiohttp.ClientSession() as s:
            try:
                await asyncio.wait_for(s.post(env["url"] + "/v1/chat/completions", json={
                    "messages": ASK, "max_tokens": 1500, "temperature": 1.0, "stop": ["\u0000never"]}), 0.5)
            except asyncio.TimeoutError:
                pass                       # the client gives up and closes its connection
        for _ in range(100):
            if not engine.active:
                return True
            await asyncio.sleep(0.05)
        return False
    assert run(go()), "the engine kept decoding a request nobody waits for"


def test_a_streaming_client_that_leaves_stops_its_decoding_quietly(env, caplog):
    """Streaming: the next chunk meets a closed connection. The engine stops decoding for it, the server keeps
    serving, and nothing is logged (the write's ConnectionResetError stays inside the handler: aiohttp would print
    it as a server error with its traceback)."""
    engine = env["engine"]

    async def go():
        reader, writer = await asyncio.open_connection("127.0.0.1", int(env["url"].rsplit(":", 1)[1]))
        body = json.dumps({"messages": ASK, "max_tokens": 1500, "temperature": 1.0, "stream": True,
                           "stop": ["\u0000never"]}).encode()
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        for _ in range(2):                                      # the role chunk, then a token's: it decodes
            while b"data: " not in await reader.readline():
                pass
        writer.close()
        await writer.wait_closed()
        for _ in range(100):
            if not engine.active:
                break
            await asyncio.sleep(0.05)
        else:
            return False
        return (await post(env["url"], "/v1/chat/completions", {"messages": ASK, "max_tokens": 2}))[0] == 200
    assert run(go()), "the engine kept decoding a stream nobody reads"
    assert not [r for r in caplog.records if r.levelno >= 30], [r.getMessage() for r in caplog.records]


def test_health_says_unhealthy_once_the_engine_is_gone(tmp_path):
    ckpt = tiny.write_tiny_checkpoint(tmp_path / "ckpt", "lfm2")
    h = inference.start_local(ckpt, port=free_port(), name="tiny", dtype=torch.float32, device="cpu", api_key=None)
    try:
        assert servers.healthy(h.url)
        h.server.engine.stop()
        assert not servers.healthy(h.url)
        got, err = run(post(h.url, "/v1/chat/completions", {"messages": ASK, "max_tokens": 2}))
        assert got == 503 and "engine" in err["message"]           # an answer, not a hang
    finally:
        h.stop()


@pytest.mark.parametrize("recipe,visible,serve,train", [
    ("LFM3-1.7B", 2, [0], [1]), ("LFM2.5-24B-A2B", 4, [0, 1], [2, 3]), ("TwIL-8B", 8, [0, 1], [2, 3]),
    ("LFM2.5-24B-A2B", 1, [0], [0]), ("tiny", 4, [], [])])
def test_gpu_plan_from_the_recipes_gpu_count(recipe, visible, serve, train):
    """A simulated machine with `visible` GPUs: the recipe's count splits into serving and training GPUs."""
    cfg = recipe_config(recipe)
    got = servers.gpu_plan(cfg["gpus"], visible, memory=cfg["gpu_memory"])
    assert got[:2] == (serve, train)
    assert got[2] == (0.5 if set(serve) & set(train) else cfg["gpu_memory"])     # a shared GPU: vLLM takes half


def test_gpu_plan_overrides_and_bad_indices():
    assert servers.gpu_plan(4, 8, "0,1,2,3", "4")[:2] == ([0, 1, 2, 3], [4])
    assert servers.gpu_plan(2, 4, "3")[:2] == ([3], [0])                       # training: the first GPU vLLM leaves
    with pytest.raises(ValueError, match=r"GPUs \[5\]: this machine has 2 GPU"):
        servers.gpu_plan(2, 2, "5")
    assert servers.gpu_plan(1, 1, "0") == ([0], [0], 0.5)                    # one GPU named: shared, vLLM at most half
    assert servers.gpu_plan(2, 2, "0,0")[:2] == ([0], [1])                    # a GPU named twice is one GPU


def test_vllm_command_places_vllm_on_its_gpus(tmp_path, monkeypatch):
    ckpt = tiny.write_tiny_checkpoint(tmp_path / "ckpt", "lfm2")
    cmd, env = servers.vllm_command(ckpt, 1, gpus=[0, 1], memory=0.9, served_name="LFM2-1.2B", max_model_len=4096)
    flags = {cmd[i]: cmd[i + 1] for i in range(3, len(cmd) - 1)}
    assert flags["--tensor-parallel-size"] == "2" and flags["--gpu-memory-utilization"] == "0.9"
    assert flags["--served-model-name"] == "LFM2-1.2B" and flags["--max-model-len"] == "4096"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")             # indices count among the GPUs we see
    assert servers.vllm_command(ckpt, 1, gpus=[2, 3])[1]["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert "--tensor-parallel-size" not in servers.vllm_command(ckpt, 1)[0]     # no GPUs named: vLLM's defaults


def test_vllm_context_is_clamped_to_the_checkpoints(tmp_path, capsys):
    ckpt = tiny.write_tiny_checkpoint(tmp_path / "ckpt", "lfm2")          # max_position_embeddings 4096
    cmd = servers.vllm_command(ckpt, 1, max_model_len=131072)[0]
    assert cmd[cmd.index("--max-model-len") + 1] == "4096"
    assert "context 131072 is above" in capsys.readouterr().err
    cmd = servers.vllm_command(ckpt, 1, max_model_len=2048)[0]
    assert cmd[cmd.index("--max-model-len") + 1] == "2048"


def test_vllm_with_no_gpu_count_on_a_gpu_machine_shares_one_gpu_capped():
    """--server vllm on a model with no recipe row (--gpus 0): GPU 0 for both, vLLM at most half of it (it had no
    --gpu-memory-utilization and no CUDA_VISIBLE_DEVICES, on the GPU training used)."""
    import plan
    cfg = dict(recipe_config("/some/checkpoint"), server="vllm", gpus=0)
    assert plan.place(cfg, 1) == ([0], [0], 0.5) and plan.place(cfg, 0) == ([], [], cfg["gpu_memory"])


def test_train_flags_place_the_gpus():
    import train
    cfg = effective_config(train.parse_args(["--model", "LFM2.5-24B-A2B", "--server", "vllm", "--server-gpus",
                                             "0,1,2", "--train-gpus", "3", "--gpu-memory", "0.8"]))
    assert servers.gpu_plan(cfg["gpus"], 4, cfg["server_gpus"], cfg["train_gpus"], cfg["gpu_memory"]) == ([0, 1, 2], [3], 0.8)
    with pytest.raises(SystemExit, match="--gpu-memory must be"):
        effective_config(train.parse_args(["--model", "tiny", "--gpu-memory", "1.5"]))


# ----------------------------------------------------------------------------- python serve.py

def serve_py(args, env, **kw):
    return subprocess.Popen([sys.executable, str(ROOT / "serve.py"), *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)


@pytest.fixture
def cache_env(tmp_path):
    env = dict(os.environ, HARNESS_RL_CACHE=str(tmp_path / "cache"), PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    env.pop("HARNESS_RL_API_KEY", None)
    return env


def test_serve_py_takes_train_pys_tiny_model_and_answers_a_chat(cache_env, tmp_path):
    """`python serve.py --model tiny --port 0`: the tiny checkpoint written into the (empty) cache as train.py
    writes it, the port it bound printed, a real chat answered, and Ctrl-C ends it without a traceback."""
    def deaf():         # as a parent may leave it: SIGINT ignored and blocked (a full CI run did, by some test)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    p = serve_py(["--model", "tiny", "--port", "0"], cache_env, preexec_fn=deaf)
    try:
        line, deadline = "", time.time() + 180
        while not line.startswith("serving") and time.time() < deadline and p.poll() is None:
            if select.select([p.stdout], [], [], 1)[0]:
                line = p.stdout.readline()
        assert line.startswith("serving tiny (lfm3) on http://127.0.0.1:"), (line, p.poll())
        url = line.split(" on ")[1].strip()
        body = {"model": "tiny", "messages": [{"role": "user", "content": "Write a number."}], "max_tokens": 4,
                "logprobs": True, "return_token_ids": True}
        req = urllib.request.Request(url + "/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            out = json.loads(r.read())
        choice = out["choices"][0]
        assert choice["message"]["role"] == "assistant" and 1 <= len(choice["token_ids"]) <= 4
        assert len(choice["logprobs"]["content"]) == len(choice["token_ids"]) and out["model"] == "tiny"
        assert (tmp_path / "cache" / "tiny-lfm3" / "config.json").is_file()
        assert not [f for f in (tmp_path / "cache").iterdir() if f.name.startswith(".")]     # no temp folder left
        p.send_signal(signal.SIGINT)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:           # where it hangs: faulthandler's dump of every thread
            p.send_signal(signal.SIGABRT)
            _, err = p.communicate(timeout=30)
            pytest.fail(f"serve.py still running 60 s after Ctrl-C; its threads:\n{err[-6000:]}")
        assert p.returncode == 0 and "Traceback" not in err, err
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.mark.parametrize("model, needle", [
    ("no-such-model", "'no-such-model': not a checkpoint folder, a .gguf file, a known model (tiny, tiny-lfm2, "),
    ("{tmp}/missing", "'{tmp}/missing': no such folder"),
    ("{tmp}/notes.txt", "'{tmp}/notes.txt': a file, not a checkpoint folder"),
    ("{tmp}/empty", "{tmp}/empty: no config.json"),
    ("tiny --lora a={tmp}/missing", "{tmp}/missing"),
    ("tiny --lora a", "--lora 'a': expected NAME=PATH"),
    ("tiny --kv-cache nan", "--kv-cache must be a number of GiB >= 0 (0: auto), got nan"),
    ("tiny --kv-cache -1", "--kv-cache must be a number of GiB >= 0 (0: auto), got -1.0"),
])
def test_serve_py_says_in_one_line_what_is_wrong_with_its_model(cache_env, tmp_path, model, needle):
    (tmp_path / "notes.txt").write_text("not a checkpoint\n")
    (tmp_path / "empty").mkdir()
    p = serve_py(["--port", "0", "--model", *model.format(tmp=tmp_path).split()], cache_env)
    try:
        out, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    lines = err.strip().splitlines()
    assert p.returncode != 0 and not out and "Traceback" not in err, err
    assert len(lines) == 1 or lines[0].startswith("usage:"), err
    assert needle.format(tmp=tmp_path) in lines[-1], err


def test_sessions_sharing_a_long_prefix_prefill_it_once_and_keep_a_fresh_forwards_logprobs(env):
    """A GRPO group's sessions share the system prompt and task, then differ: the 2nd stores the shared
    part, the others start from it; every row still samples with a fresh forward's logprobs (prefill and
    decode), per adapter."""
    load(env, "ra", env["rand"])
    e, system = env["engine"], {"role": "system", "content": " ".join(f"rule {i} holds" for i in range(40))}
    before = e.prefix_hits
    for adapter, ref_adapter in (("ra", "rand"), ("tiny", None)):
        hits = e.prefix_hits
        rs = [run(post(env["url"], "/v1/chat/completions", {
            "model": adapter, "messages": [system, {"role": "user", "content": f"task {i}: go"}], "max_tokens": 10,
            "temperature": 1.0, "logprobs": True, "return_token_ids": True, "seed": i}))[1] for i in range(4)]
        assert e.prefix_hits - hits == 3          # the 2nd stores the shared part, the 3rd and 4th start from it
        lora.set_adapter(env["ref"], ref_adapter)
        for r in rs:
            prompt, out = r["prompt_token_ids"], r["choices"][0]["token_ids"]
            with torch.no_grad():
                logits = env["ref"](torch.tensor([prompt + out]))[0, len(prompt) - 1:-1]
            want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out)[:, None])[:, 0]
            got = torch.tensor([x["logprob"] for x in r["choices"][0]["logprobs"]["content"]])
            assert (got - want).abs().max() <= 1e-4
    lora.set_adapter(env["ref"], None)
    assert e.prefix_hits - before == 6 and e.prompt_tokens <= e.prompt_cache_tokens


def test_client_sends_again_when_the_server_drops_the_connection_before_replying():
    """A server that closes a connection without a reply (a keep-alive connection it had just timed out: vLLM's
    uvicorn after 5 s) raises aiohttp's ServerDisconnectedError, which is no OSError: chat() sends once more on a
    new connection; a post without resend fails with one RuntimeError naming the path."""
    async def go():
        seen = []

        async def handle(reader, writer):
            head = await reader.readuntil(b"\r\n\r\n")
            n = int(next(x for x in head.decode().split("\r\n") if x.lower().startswith("content-length")).split(":")[1])
            await reader.readexactly(n)
            seen.append(n)
            if len(seen) % 2:                              # every other request: dropped without a reply
                writer.close()
                return
            body = json.dumps({"ok": len(seen)}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        client = servers.Client(url)
        try:
            assert await client.chat({"messages": []}) == {"ok": 2}
            with pytest.raises(RuntimeError, match="POST /v1/load_lora_adapter failed: ServerDisconnected"):
                await client.post("/v1/load_lora_adapter", {})
        finally:
            await client.close()
            server.close()
        return seen
    assert len(asyncio.run(go())) == 3


def test_a_long_prompt_prefills_in_chunks_while_the_batch_decodes(env):
    """Chunked prefill: a 300-token prompt goes in 8-token chunks with decode steps of the running row
    between them (that row keeps streaming), a prompt that shares a stored one's start continues from it in
    chunks too, and every reply's logprobs are a fresh forward's over its whole sequence."""
    model, e = _bare_engine(env["ckpt"], env["fmt"], prefill_chunk=8)
    loop, g = asyncio.new_event_loop(), torch.Generator().manual_seed(0)
    request = lambda n, tokens, seed, prompt=None: _request(loop, prompt or torch.randint(  # noqa: E731
        3, 200, (n,), generator=g).tolist(), tokens, seed)
    try:
        a, b = request(20, 40, 1), request(300, 5, 2)
        e.held.append(a)
        e._fill()                             # nothing decoding: a's whole prompt at once
        assert e.active == [a] and e.interleaved == 0
        e.held.append(b)
        c = request(0, 5, 3, prompt=b.prompt_ids[:250] + [7] * 40)     # shares b's first 250 tokens
        e.held.append(c)
        joined = {}
        while e.active or e.held or e.filling:
            e._fill()
            for r in (b, c):
                if r in e.active:
                    joined.setdefault(id(r), len(a.out_ids))
            if e.active:
                e._step()
        assert e.interleaved >= (300 + 40) // 8, e.interleaved       # b's and c's chunks beside a's decoding
        assert 1 < joined[id(b)] < joined[id(c)] <= len(a.out_ids) == 40, joined   # a streamed meanwhile
        assert e.prefix_hits >= 1
    finally:
        torch.set_grad_enabled(True)
        loop.close()
    _fresh_forwards_logprobs(model, (a, b, c))


def test_sliding_layers_rings_count_per_row_in_a_small_kv_budget(tmp_path):
    """A tiny LFM3 (a sliding layer: each row's ring costs 8 positions) under a budget of 160 positions: rows are
    admitted while rows x (length + ring) fits - several at once, not one - growing rows are preempted, the
    buffers never pass the budget, and the logprobs are a fresh forward's."""
    ckpt = tiny.write_tiny_checkpoint(tmp_path, "lfm3")
    fmt = ChatFormat.from_checkpoint(ckpt)
    probe = checkpoint.load_model(ckpt, dtype=torch.float32, device="cpu")
    model, e = _bare_engine(ckpt, fmt, kv_bytes=160 * E.kvcache.costs(probe.config, 4)[0])
    assert (e.kv_positions, e.ring_positions) == (160, 8)
    loop, g = asyncio.new_event_loop(), torch.Generator().manual_seed(1)
    reqs = [_request(loop, torch.randint(3, 200, (14,), generator=g).tolist(), 24, i) for i in range(6)]
    e.held.extend(reqs)
    most = 0
    try:
        while e.active or e.held or e.filling:
            e._fill()
            if e.active:
                e._step()
            most = max(most, len(e.active))
            assert e.cache.slots * (e.cache.cap + e.cache.ring_cost) <= 160 or len(e.active) == 1
    finally:
        torch.set_grad_enabled(True)
        loop.close()
    assert most >= 3 and e.preemptions > 0 and e.kv_peak <= 160, (most, e.preemptions, e.kv_peak)
    _fresh_forwards_logprobs(model, reqs)


def _bare_engine(ckpt, fmt, **kw):
    """(model, an Engine on it) whose thread has ended: the test drives _fill and _step itself."""
    model = checkpoint.load_model(ckpt, dtype=torch.float32, device="cpu")
    lora.add_lora(model, adapters=())
    e = E.Engine(model, fmt, **kw)
    e.running = False
    e.wake.set()
    e.thread.join()
    e.running = True          # (its thread is gone; _fill and _prefill go on while this is set)
    torch.set_grad_enabled(False)
    return model, e


def _request(loop, prompt, tokens, seed):
    r = E.Request(prompt, None, tokens, 1.0, 1.0, 0, seed, [], set())
    r.loop, r.events = loop, asyncio.Queue()
    return r


def _fresh_forwards_logprobs(model, reqs):
    for r in reqs:
        assert len(r.out_ids) == r.max_tokens
        with torch.no_grad():
            logits = model(torch.tensor([r.prompt_ids + r.out_ids]))[0, len(r.prompt_ids) - 1:-1]
        want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(r.out_ids)[:, None])[:, 0]
        assert (torch.tensor(r.out_lps) - want).abs().max() <= 1e-4


def test_a_kv_budget_queues_and_preempts_rows_and_every_reply_keeps_a_fresh_forwards_logprobs(env):
    """A budget of 160 positions for six 40-token replies to ~25-token prompts: requests wait for room, growing
    rows preempt the newest (its K/V freed, later prefilled again over prompt + tokens so far), the buffers never
    pass the budget, and every reply's logprobs are a fresh forward's over its whole sequence."""
    per_token = env["engine"].kv_per_token
    lora.set_adapter(env["ref"], None)
    h = inference.start_local(env["ckpt"], port=free_port(), name="tiny", dtype=torch.float32, device="cpu", api_key=None,
                      kv_cache=160 * per_token / 2**30)
    e = h.server.engine
    assert e.kv_positions == 160

    async def ask(i):
        return (await post(h.url, "/v1/chat/completions", {
            "model": "tiny", "messages": [{"role": "user", "content": f"Task {i}: count the files here."}],
            "max_tokens": 40, "temperature": 1.0, "logprobs": True, "return_token_ids": True, "seed": i}))[1]

    async def all_six():
        return await asyncio.gather(*(ask(i) for i in range(6)))
    try:
        rs = run(all_six())
    finally:
        h.stop()
    assert e.preemptions > 0 and 0 < e.kv_peak <= 160, (e.preemptions, e.kv_peak)
    for r in rs:
        prompt, out = r["prompt_token_ids"], r["choices"][0]["token_ids"]
        assert len(out) == 40 or r["choices"][0]["finish_reason"] == "stop", r
        with torch.no_grad():
            logits = env["ref"](torch.tensor([prompt + out]))[0, len(prompt) - 1:-1]
        want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out)[:, None])[:, 0]
        got = torch.tensor([x["logprob"] for x in r["choices"][0]["logprobs"]["content"]])
        assert (got - want).abs().max() <= 1e-4
