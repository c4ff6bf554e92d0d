"""Serving at the recipe's load: the embedded engine (serve.py + engine.py) beside the real vLLM, over the same
OpenAI HTTP API, on random checkpoints the bench writes itself. Prints generated tokens/s, time to first token
(p50 / p90) and peak memory per server, and ours / vLLM.

    python bench/serve.py                                  # CPU: scaled-down shapes and load, ours + vLLM (CPU build)
    timeout 540 python bench/serve.py --device cuda        # GPU: LFM3-1.7B (ours) vs LFM2-1.2B (vLLM), bf16
    python bench/serve.py --server ours --sessions 1       # the one-at-a-time baseline of continuous batching
    python bench/serve.py --decode                         # one 48-row decode step: 15 / 3 / 1 adapters, base

The load (seeded, the same for every server): `--sessions` concurrent sessions (48 = 6 groups x 8 rollouts) that
run episodes back to back until the window closes, as the rollout pool keeps 48 going. Group g is harness a(g%3):
its system prompt + tools (one per harness, 2-6k tokens on the GPU, 1/16 of that on the CPU) and the group's task
(shared by its 8 sessions, so their first prompts are identical) open each episode; every turn appends the
assistant's reply and a tool output, so prompts grow (2-8k) until the next turn would pass the context. Completions
are 100-1000 tokens (max_tokens; random weights over a 128k / 65k vocabulary rarely hit EOS). Each request names
adapter a{harness}-v{version} - 3 harnesses x 5 versions, rank 32 - the version moving with the turn and episode.
Requests are streaming chat completions with logprobs and token ids (what the proxy asks for); the assistant
turns fed back are the plan's text of the sampled length, not the model's, so both servers see the same prompts.

Measured over `--seconds` after a warm-up (one short request per adapter): tokens that arrive inside the window
(requests cut at its end count what they streamed), TTFT of requests begun inside it, and peak memory during it
- GPU: the device's used memory above what it was before the server started (both servers the same way; ours
also its allocator's peak); CPU: PSS of the server's process group, and tokens per CPU second of that group
(steadier than tokens/s on a shared machine; the load average is printed beside it). Ours runs as its own
process (`--child`), as vLLM does, so neither shares a GIL with the load generator.

Shapes: ours serves LFM3-1.7B (`lfm3-1.7b`: 24 layers, hidden 2048, 16 heads x 128, vocab 128 000); vLLM has no
LFM3, so the anchor is an LFM2 of similar size (`lfm2-1.2b`: 16 layers, hidden 2048, 32 x 64 heads, vocab 65 536),
and `--server all` adds ours on that same checkpoint (apples to apples). The CPU shapes keep each family's
layout at hidden 256 (vLLM's CPU attention needs heads of 64). Checkpoints are written once under --work.

Left out: several GPUs (one server, one device), the harness subprocesses and the guard proxy (the load is the
requests they make), EOS-driven completion lengths.
"""
import argparse
import asyncio
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import checkpoint  # noqa: E402
import engine  # noqa: E402
import kvcache  # noqa: E402
import lora  # noqa: E402
from families import FAMILIES  # noqa: E402
from model import CausalLM  # noqa: E402
import servers  # noqa: E402
import tiny  # noqa: E402
from chat import ChatFormat  # noqa: E402


def lfm3_layers(n):
    return ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0 else "conv"
            for i in range(n)]


def lfm2_layers(n, full):
    return ["full_attention" if i in full else "conv" for i in range(n)]


def lfm2_shape(H, n, full, heads, kv, ff, vocab):
    """An LFM2 config in its real key layout (vLLM reads conv_dim, block_*; full_attn_idxs)."""
    return dict(vocab_size=vocab, hidden_size=H, num_hidden_layers=n, num_attention_heads=heads, num_heads=heads,
                num_key_value_heads=kv, intermediate_size=ff, block_ff_dim=ff, block_dim=H, conv_dim=H,
                conv_dim_out=H, block_auto_adjust_ff_dim=False, layer_types=lfm2_layers(n, full),
                full_attn_idxs=sorted(full))


SHAPES = {   # name -> (model_type, config.json fields over tiny.tiny_config)
    "lfm3-1.7b": ("lfm3", dict(vocab_size=128000, hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
                               num_key_value_heads=4, head_dim=128, intermediate_size=7680, sliding_window=256,
                               conv_L_cache=7, layer_types=lfm3_layers(24))),
    "lfm2-1.2b": ("lfm2", lfm2_shape(2048, 16, {2, 5, 8, 10, 12, 14}, 32, 8, 8192, 65536)),
    "lfm3-cpu": ("lfm3", dict(vocab_size=8192, hidden_size=256, num_hidden_layers=8, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=64, intermediate_size=768, sliding_window=64,
                              conv_L_cache=7, layer_types=lfm3_layers(8))),
    "lfm2-cpu": ("lfm2", lfm2_shape(256, 6, {2, 4}, 4, 2, 1024, 8192)),
}
LOADS = {   # token counts: (low, high) of each part
    "gpu": dict(prefix=(2048, 6144), task=(200, 600), completion=(100, 1000), tool=(100, 1000), context=9216),
    "cpu": dict(prefix=(128, 384), task=(12, 36), completion=(8, 64), tool=(8, 64), context=576),
}
HARNESSES, VERSIONS, RANK = 3, 5, 32


def max_len(load):
    """Both servers' context: the plan's, with room for its token estimates being short."""
    return int(LOADS[load]["context"] * 1.25) + 64


# ----------------------------------------------------------------------------- checkpoints and adapters

def widen_tokenizer(path, vocab_size):
    """The tiny BPE tokenizer with placeholder tokens `w<id>` up to vocab_size, so every id the model can
    sample decodes (vLLM refuses ids beyond its tokenizer); encoding never produces them."""
    t = json.loads(path.read_text())
    used = set(t["model"]["vocab"].values()) | {a["id"] for a in t["added_tokens"]}
    t["model"]["vocab"].update({f"w{i}": i for i in range(vocab_size) if i not in used})
    path.write_text(json.dumps(t))


def write_checkpoint(d, shape, dtype, seed=0):
    """A random checkpoint of a named shape: config.json in the family's layout, bf16/fp32 safetensors, the tiny
    tokenizer (widened to the vocabulary) and chat template. Reused when already written."""
    from safetensors.torch import save_file
    d = Path(d)
    if (d / "done").is_file():
        return d
    d.mkdir(parents=True, exist_ok=True)
    model_type, over = SHAPES[shape]
    tok = tiny.write_tiny_tokenizer(d, model_type)
    widen_tokenizer(d / "tokenizer.json", over["vocab_size"])
    cfg_d = tiny.tiny_config(model_type, **over, bos_token_id=tok["bos_token_id"], eos_token_id=tok["eos_token_id"],
                             pad_token_id=tok["pad_token_id"], max_position_embeddings=32768,
                             torch_dtype=str(dtype).removeprefix("torch."))
    g = torch.Generator().manual_seed(seed)
    with torch.device("meta"):     # shapes only: the weights are drawn straight in `dtype`, no fp32 copy
        model = CausalLM(checkpoint.parse_config(cfg_d))
    sd = {k: torch.ones(v.shape, dtype=dtype) if k.endswith("norm.weight") else
          (0.02 * torch.randn(v.shape, generator=g)).to(dtype) for k, v in checkpoint.hf_state_dict(model).items()}
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(cfg_d, indent=2) + "\n")
    (d / "done").touch()
    return d


def write_adapters(ckpt, out, seed=0):
    """HARNESSES x VERSIONS random rank-32 PEFT adapters a<h>-v<v> on every target layer of `ckpt` (B non-zero,
    so each changes the output). Returns {name: dir}."""
    out, cfg = Path(out), checkpoint.read_config(ckpt)
    with torch.device("meta"):
        shapes = {n: (m.in_features, m.out_features) for n, m in CausalLM(cfg).named_modules()
                  if isinstance(m, torch.nn.Linear) and n.rsplit(".", 1)[-1] in FAMILIES[cfg.model_type].lora_targets
                  and n != "lm_head"}
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": RANK,
              "target_modules": sorted(FAMILIES[cfg.model_type].lora_targets), "bias": "none", "lora_dropout": 0.0,
              "use_rslora": False, "use_dora": False, "fan_in_fan_out": False, "modules_to_save": None,
              "init_lora_weights": True, "inference_mode": True, "rank_pattern": {}, "alpha_pattern": {},
              "base_model_name_or_path": str(ckpt)}
    g, names = torch.Generator().manual_seed(seed), {}
    for h in range(HARNESSES):
        for v in range(VERSIONS):
            name = names.setdefault(f"a{h}-v{v}", out / f"a{h}-v{v}")
            if (name / "adapter_config.json").is_file():
                continue
            sd = {}
            for n, (i, o) in shapes.items():
                sd[f"{lora.PREFIX}{n}.lora_A.weight"] = torch.randn(RANK, i, generator=g) / math.sqrt(i)
                sd[f"{lora.PREFIX}{n}.lora_B.weight"] = 0.02 * torch.randn(o, RANK, generator=g)
            lora.write_adapter(name, config, sd)
    return names


# ----------------------------------------------------------------------------- the load

WORDS = re.findall(r"\S+", tiny._CORPUS)


class Plan:
    """The seeded conversations: text of a given token length, per harness / group / session / episode."""

    def __init__(self, load, fmt, seed=0):
        self.load, self.seed = load, seed
        sample = self.text(random.Random(seed), 4000, per_word=1.0)
        self.per_word = len(fmt.encode(sample)) / 4000        # tokens per word of this text

    def rng(self, *key):
        return random.Random(repr((self.seed,) + key))       # a str seed: the same in every process

    def text(self, rng, tokens, per_word=None):
        return " ".join(rng.choice(WORDS) for _ in range(max(1, round(tokens / (per_word or self.per_word)))))

    def length(self, rng, part):
        lo, hi = self.load[part]
        return rng.randint(lo, hi)

    def episode(self, group, session, ep):
        """Turns of one rollout: [(messages, max_tokens, adapter)], prompts growing, ending before the context."""
        ld, h = self.load, group % HARNESSES
        r_h, r_task, r = self.rng("harness", h), self.rng("task", group, ep), self.rng("rollout", group, session, ep)
        n_sys, n_task = self.length(r_h, "prefix"), self.length(r_task, "task")
        msgs = [{"role": "system", "content": self.text(r_h, n_sys)},         # harness system prompt + tools
                {"role": "user", "content": self.text(r_task, n_task)}]        # the group's task
        used = n_sys + n_task
        turns = []
        for t in range(64):
            n = self.length(r, "completion")
            if used + n > ld["context"]:
                break
            turns.append((list(msgs), n, f"a{h}-v{(t + ep + group) % VERSIONS}"))
            tool = self.length(r, "tool")
            msgs += [{"role": "assistant", "content": self.text(r, n)}, {"role": "user", "content": self.text(r, tool)}]
            used += n + tool + 12
        return turns


class Stats:
    def __init__(self):
        self.tokens, self.ttft, self.prompt, self.done, self.errors = 0, [], [], 0, []
        self.t0 = self.t1 = self.cpu0 = None

    def inside(self, t):
        return self.t0 is not None and self.t0 <= t <= self.t1


async def request(http, url, headers, msgs, max_tokens, adapter, st):
    body = {"model": adapter, "messages": msgs, "max_tokens": max_tokens, "temperature": 1.0, "top_p": 1.0,
            "stream": True, "stream_options": {"include_usage": True}, "logprobs": True,
            "return_token_ids": True}
    t0, first = time.perf_counter(), None
    async with http.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
        if r.status != 200:
            st.errors.append(f"{r.status}: {(await r.text())[:200]}")
            return
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            chunk, now = json.loads(line[6:]), time.perf_counter()
            if chunk.get("error"):
                st.errors.append(str(chunk["error"])[:200])
                return
            if chunk.get("usage") and st.inside(now):
                st.prompt.append(chunk["usage"]["prompt_tokens"])
                st.done += 1
            if not chunk.get("choices"):
                continue
            c = chunk["choices"][0]
            n = len(c.get("token_ids") or []) or len((c.get("logprobs") or {}).get("content") or [])
            if n and first is None:
                first = now
                if st.inside(t0):
                    st.ttft.append(first - t0)
            if st.inside(now):
                st.tokens += n


async def drive(url, api_key, plan, args, adapters, pgid):
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    client = servers.Client(url, api_key)
    for name, path in adapters.items():
        await client.load_adapter(name, path)
    await client.close()
    st = Stats()
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http:
        warm = [request(http, url, headers, [{"role": "user", "content": "hello"}], 4, a, Stats())
                for a in adapters]
        await asyncio.gather(*warm)

        async def session(s):
            g, k = divmod(s, 8)
            for ep in range(10**6):
                for t, (msgs, n, adapter) in enumerate(plan.episode(g, k, ep)):
                    try:
                        await request(http, url, headers, msgs, n, adapter, st)
                    except (aiohttp.ClientError, OSError) as e:       # a server that died: counted, not fatal
                        st.errors.append(f"{type(e).__name__}: {e}"[:200])
                        await asyncio.sleep(1.0)
        st.t0, st.cpu0 = time.perf_counter(), group_cpu_s(pgid)
        st.t1 = st.t0 + args.seconds
        tasks = [asyncio.create_task(session(s)) for s in range(args.sessions)]
        await asyncio.sleep(args.seconds)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return st


# ----------------------------------------------------------------------------- memory

def gpu_used_mib():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10).stdout
        return float(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return float("nan")


def group_procs(pgid):
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and int((p / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                yield p
        except (OSError, ValueError, IndexError):
            continue


def group_cpu_s(pgid):
    """CPU seconds (user + system) used so far by the processes of a group: on a shared CPU, tokens per CPU
    second is steadier than tokens per wall second."""
    total = 0
    for p in group_procs(pgid):
        try:
            total += sum(int(x) for x in (p / "stat").read_text().rsplit(")", 1)[1].split()[11:13])
        except (OSError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def group_pss_mib(pgid):
    """PSS (shared pages split between sharers) of every process in a process group, MiB."""
    total = 0
    for p in group_procs(pgid):
        try:
            total += next(int(x.split()[1]) for x in (p / "smaps_rollup").read_text().splitlines()
                          if x.startswith("Pss:"))
        except (OSError, StopIteration, ValueError, IndexError):
            continue
    return total / 1024


class Peak(threading.Thread):
    """Samples a server's memory every second: GPU used above the baseline, or its process group's PSS."""

    def __init__(self, pgid, device, base):
        super().__init__(daemon=True)
        self.pgid, self.device, self.base, self.peak, self.on = pgid, device, base, 0.0, True

    def sample(self):
        return gpu_used_mib() - self.base if self.device == "cuda" else group_pss_mib(self.pgid)

    def run(self):
        while self.on:
            self.peak = max(self.peak, self.sample())
            time.sleep(1.0)

    def stop(self):
        self.on = False
        self.peak = max(self.peak, self.sample())
        return self.peak / 1024


# ----------------------------------------------------------------------------- the servers

def child(args):
    """`--child CKPT`: our server in this process until stdin closes; `mem` on stdin answers the allocator's peak."""
    import inference
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    h = inference.start_local(args.child, dtype=dtype, device=args.device, max_batch=max(64, args.sessions), api_key=None,
                      max_model_len=max_len(args.load), kv_cache=args.kv_cache)
    print(json.dumps({"url": h.url}), flush=True)
    for line in sys.stdin:
        if line.strip() == "mem":
            cuda = args.device == "cuda"
            e = h.server.engine
            print(json.dumps({"allocated": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
                              "prompt_hits": e.prompt_hits, "prefix_hits": e.prefix_hits,
                              "prefix_tokens": e.prefix_tokens, "preemptions": e.preemptions,
                              "kv_peak_gib": e.kv_peak * e.kv_per_token / 2**30, "busy": dict(e.busy),
                              "kv_budget_gib": (e.kv_positions or 0) * e.kv_per_token / 2**30}), flush=True)
    h.stop()


def start_ours(ckpt, args, work):
    cmd = [sys.executable, __file__, "--child", str(ckpt), "--device", args.device, "--dtype", args.dtype,
           "--sessions", str(args.sessions), "--load", args.load, "--kv-cache", str(args.kv_cache)]
    log = open(Path(work) / "ours.log", "ab")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                            start_new_session=True)
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"our server did not start; see {work}/ours.log")

    def stop():
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    return servers.Handle(json.loads(line)["url"], stop, process=proc)


def run_one(kind, ckpt, args, work, plan):
    """Start one server, load the adapters, drive the load, stop it; a row of the table."""
    adapters = write_adapters(ckpt, Path(work) / "adapters" / Path(ckpt).name)
    base = gpu_used_mib() if args.device == "cuda" else 0.0
    t0 = time.time()
    if kind == "vllm":
        h = servers.start_vllm(ckpt, work, rank=RANK, max_loras=HARNESSES * VERSIONS, api_key=None,
                          max_model_len=max_len(args.load),
                          memory=args.vllm_memory if args.device == "cuda" else None)
    else:
        h = start_ours(ckpt, args, work)
    start_s = time.time() - t0
    peak = Peak(h.process.pid, args.device, base)
    peak.start()
    try:
        st = asyncio.run(drive(h.url, h.api_key, plan, args, adapters, h.process.pid))
        mem, cpu_s = peak.stop(), group_cpu_s(h.process.pid) - st.cpu0
        extra = {}
        if kind != "vllm":
            h.process.stdin.write("mem\n")
            h.process.stdin.flush()
            line = h.process.stdout.readline()
            extra = json.loads(line) if line else {}
    finally:
        peak.on = False
        h.stop()
    ttft = sorted(st.ttft) or [float("nan")]
    return dict(server=kind, model=checkpoint.read_config(ckpt).model_type, shape=Path(ckpt).name, start_s=start_s,
                tokens=st.tokens, seconds=args.seconds, tokens_per_s=st.tokens / args.seconds, requests=st.done,
                ttft_p50=statistics.median(ttft), ttft_p90=ttft[int(0.9 * (len(ttft) - 1))],
                prompt_mean=statistics.mean(st.prompt) if st.prompt else float("nan"), peak_gib=mem, cpu_s=cpu_s,
                tokens_per_cpu_s=st.tokens / cpu_s if cpu_s else float("nan"), load=os.getloadavg()[0],
                errors=len(st.errors), first_error=st.errors[0] if st.errors else None, **extra)


def decode_steps(ckpt, args, work):
    """`--decode`: one engine decode step (48 rows, one token each, KV of 200-400 tokens), in this process, with
    the rows on 15 adapters, on 3, all on one, and the base; and on 15 whose set changes every step (every layer
    restacks them: the cost when a version joins or leaves the batch). Median ms of `--repeats` steps a setting,
    in 3 rounds of blocks so a noisy machine hits every setting alike; one untimed step before each block."""
    adapters = write_adapters(ckpt, Path(work) / "adapters" / Path(ckpt).name)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    m = checkpoint.load_model(ckpt, dtype=dtype, device=args.device)
    for name, d in adapters.items():
        lora.load_adapter(m, d, adapter=name)
    names, B = list(adapters), args.sessions
    cache = m.new_cache(B, 600)
    cache.lengths[:] = torch.randint(200, 400, (B,), generator=torch.Generator().manual_seed(0))
    toks = torch.randint(0, m.config.vocab_size, (B, 1), device=args.device)
    fifteen = [names[i % 15] for i in range(B)]
    settings = {"15 adapters": lambda i: fifteen, "3 adapters": lambda i: [names[i % 3] for i in range(B)],
                "1 adapter": lambda i: names[0], "base": lambda i: None,
                "15, set changing": lambda i: fifteen if i % 2 else fifteen[:-1] + [None]}
    times = {k: [] for k in settings}
    torch.set_grad_enabled(False)
    for _ in range(3):
        for k, rows in settings.items():
            for i in range(args.repeats // 3 + 1):
                lora.set_adapter(m, rows(i))      # per step, as the engine does
                t = time.perf_counter()
                m(toks, cache=cache)[:, -1].float().cpu()
                times[k] += [time.perf_counter() - t] if i else []
                cache.lengths -= 1          # the next step decodes at the same lengths
    print(f"# decode step: {B} rows, {Path(ckpt).name}, {args.dtype} on {args.device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, median of {len(times['base'])}, load {os.getloadavg()[0]:.1f}")
    for k, ts in times.items():
        print(f"{k:<18}{statistics.median(ts) * 1e3:>8.1f} ms")


def generate_vs(ckpt, args):
    """`--generate`: decoding tokens/s of --sessions rows (prompts of --prompt tokens, --new tokens each, sampled at
    temperature 1, the base) - ours (model.py + kvcache.py + engine.sample, the engine's step without its thread)
    beside transformers' `generate` on the same checkpoint and the memory-bandwidth roofline (a decode step must read
    every weight and every row's K/V once: bytes / bandwidth). Decode time is the whole minus a 1-token run (the
    prefill), for both."""
    import transformers
    dev, dtype = torch.device(args.device), {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    B, P, N = args.sessions, args.prompt, args.new
    ids = torch.randint(100, 8000, (B, P), generator=torch.Generator().manual_seed(0)).to(dev)
    torch.set_grad_enabled(False)

    def timed(f):
        f()                                     # warm-up (kernels, allocator)
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        sync()
        t = time.perf_counter()
        f()
        sync()
        return time.perf_counter() - t

    ours = checkpoint.load_model(ckpt, dtype=dtype, device=args.device)
    lora.add_lora(ours, adapters=())

    def ours_run(n):
        cache = ours.new_cache(B, P + n)
        logits = ours(ids, cache=cache)[:, -1]
        for step in range(n):
            tok, _ = engine.sample(logits, [1.0] * B, [1.0] * B, [0] * B, list(range(B)), [step] * B)
            torch.stack([tok.double()]).cpu()   # the engine's one copy a step
            if step < n - 1:
                logits = ours(tok[:, None], cache=cache)[:, -1]
    cfg = checkpoint.parse_config(json.loads((Path(ckpt) / "config.json").read_text()))
    weights = sum(p.numel() * p.element_size() for p in ours.parameters())
    per_pos, per_row = kvcache.costs(cfg, torch.finfo(dtype).bits // 8)
    kv = B * (per_pos * (P + N / 2) + per_row)              # the mean step's K/V read
    if args.bandwidth:
        bw = args.bandwidth * 1e9
    else:                                                   # this device's copy bandwidth (read + write)
        x, y = torch.ones(256 * 2**20 // 4, device=dev), torch.zeros(256 * 2**20 // 4, device=dev)
        bw = 2 * x.numel() * 4 / timed(lambda: y.copy_(x))
    roofline = (N - 1) * (weights + kv) / bw
    print(f"# decoding: {B} rows, prompts of {P}, {N} new tokens each, {Path(ckpt).name} {args.dtype} on "
          f"{torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}; a step reads {weights / 2**30:.2f} GiB "
          f"of weights + {kv / 2**30:.3f} GiB of K/V at {bw / 1e9:.0f} GB/s; torch {torch.__version__}, transformers "
          f"{transformers.__version__}")
    print(f"{'':<24}{'decode s':>9}{'tokens/s':>10}{'of roofline':>13}")

    def row(name, t):
        print(f"{name:<24}{t:>9.2f}{B * (N - 1) / t:>10.0f}{roofline / t:>12.0%}", flush=True)
    row("roofline", roofline)
    row("ours", timed(lambda: ours_run(N)) - timed(lambda: ours_run(1)))
    del ours
    try:
        ref = transformers.AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype).to(dev).eval()
    except (ValueError, KeyError) as e:       # a transformers without this family (LFM3 is new): --shape lfm2-*
        return print(f"transformers generate: not run, {str(e).splitlines()[0][:160]}")
    gen = lambda n: ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,  # noqa
                                 do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=0)
    row("transformers generate", timed(lambda: gen(N)) - timed(lambda: gen(1)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="(default: %(default)s)")
    ap.add_argument("--shape", default=None, choices=list(SHAPES), help="ours' model (default: lfm3-1.7b on cuda, "
                    "lfm3-cpu on cpu); vLLM's is the LFM2 beside it; --generate: an LFM2 shape is one transformers "
                    "has had longest")
    ap.add_argument("--load", default=None, choices=list(LOADS), help="prompt/completion lengths (default: the "
                    "device's)")
    ap.add_argument("--server", default="both", choices=["ours", "vllm", "both", "all"],
                    help="both: ours + vLLM; all: + ours on vLLM's LFM2 checkpoint (default: %(default)s)")
    ap.add_argument("--sessions", type=int, default=48, help="concurrent sessions, 8 a group (default: %(default)s)")
    ap.add_argument("--seconds", type=float, default=None, help="measured window per server (default: 60 on cuda, "
                    "40 on cpu)")
    ap.add_argument("--dtype", default=None, choices=["bf16", "fp32"], help="(default: bf16 on cuda, fp32 on cpu)")
    ap.add_argument("--vllm-memory", type=float, default=0.4, help="vLLM's --gpu-memory-utilization "
                    "(default: %(default)s)")
    ap.add_argument("--work", default=str(ROOT / "runs" / "bench-serve"), help="checkpoints, adapters, logs "
                    "(default: %(default)s)")
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument("--decode", action="store_true", help="instead: time one decode step of --sessions rows in "
                    "process, rows on 15 / 3 / 1 adapters and the base (no server, no HTTP)")
    ap.add_argument("--repeats", type=int, default=20, help="--decode: steps per setting (default: %(default)s)")
    ap.add_argument("--generate", action="store_true", help="instead: decoding tokens/s, ours vs transformers' "
                    "generate vs the memory-bandwidth roofline (--sessions rows, --prompt, --new)")
    ap.add_argument("--prompt", type=int, default=None, help="--generate: prompt tokens (default: 2048 cuda, 256 cpu)")
    ap.add_argument("--new", type=int, default=None, help="--generate: new tokens a row (default: 128 cuda, 32 cpu)")
    ap.add_argument("--bandwidth", type=float, default=None, help="--generate: the device's memory bandwidth in GB/s "
                    "(default: 4800 on cuda, an H200's HBM3e; measured by a copy on cpu)")
    ap.add_argument("--kv-cache", type=float, default=0, help="ours: the K/V budget in GiB (0: engine.kv_budget's "
                    "share); a small one shows admission and preemption at the full load (its peak is printed)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))     # `timeout` stops the servers too (finally: stop)
    gpu = args.device == "cuda"
    args.load = args.load or ("gpu" if gpu else "cpu")
    args.dtype = args.dtype or ("bf16" if gpu else "fp32")
    if args.child:
        return child(args)
    args.seconds = args.seconds or (60.0 if gpu else 40.0)
    ours_shape = args.shape or ("lfm3-1.7b" if gpu else "lfm3-cpu")
    anchor_shape = ours_shape.replace("lfm3-1.7b", "lfm2-1.2b").replace("lfm3-cpu", "lfm2-cpu")
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    work = Path(args.work)
    if args.generate:
        args.prompt, args.new = args.prompt or (2048 if gpu else 256), args.new or (128 if gpu else 32)
        args.bandwidth = args.bandwidth or (4800.0 if gpu else None)
        return generate_vs(write_checkpoint(work / f"{ours_shape}-{args.dtype}", ours_shape, dtype), args)
    if args.decode:
        return decode_steps(write_checkpoint(work / f"{ours_shape}-{args.dtype}", ours_shape, dtype), args, work)
    runs = {"ours": [("ours", ours_shape)], "vllm": [("vllm", anchor_shape)],
            "both": [("ours", ours_shape), ("vllm", anchor_shape)],
            "all": [("ours", ours_shape), ("vllm", anchor_shape), ("ours", anchor_shape)]}[args.server]
    print(f"# serving: {args.sessions} sessions ({args.sessions // 8} groups x 8), load {args.load} "
          f"{LOADS[args.load]}, {HARNESSES} adapters x {VERSIONS} versions (rank {RANK}), {args.dtype} on "
          f"{torch.cuda.get_device_name() if gpu else 'cpu'}, {args.seconds:.0f} s window, torch {torch.__version__}",
          flush=True)
    print(f"{'server':<6}{'shape':<11}{'start s':>8}{'tokens':>8}{'tokens/s':>10}{'requests':>9}{'TTFT p50 s':>11}"
          f"{'p90 s':>7}{'prompt':>8}{'peak GiB':>9}{'errors':>7}" + ("" if gpu else f"{'tok/cpu-s':>10}{'load':>6}"),
          flush=True)
    rows = []
    for kind, shape in runs:
        ckpt = write_checkpoint(work / f"{shape}-{args.dtype}", shape, dtype)
        plan = Plan(LOADS[args.load], ChatFormat.from_checkpoint(ckpt))
        try:
            r = run_one(kind, ckpt, args, work, plan)
        except RuntimeError as e:        # vLLM not installed or not starting: the other rows still count
            print(f"{kind:<6}{shape:<11} not run: {str(e).splitlines()[0]}", flush=True)
            continue
        rows.append(r)
        print(f"{kind:<6}{shape:<11}{r['start_s']:>8.0f}{r['tokens']:>8}{r['tokens_per_s']:>10.0f}{r['requests']:>9}"
              f"{r['ttft_p50']:>11.2f}{r['ttft_p90']:>7.2f}{r['prompt_mean']:>8.0f}{r['peak_gib']:>9.2f}"
              f"{r['errors']:>7}" + ("" if gpu else f"{r['tokens_per_cpu_s']:>10.0f}{r['load']:>6.1f}")
              + (f"  (allocator peak {r['allocated']:.1f} GiB)" if r.get("allocated") else "")
              + (f"  K/V peak {r['kv_peak_gib']:.3f} of {r['kv_budget_gib']:.3f} GiB, {r['preemptions']} preempted"
                 if r.get("kv_budget_gib") else "")
              + (f"  prompt hits {r['prompt_hits']}, prefix hits {r['prefix_hits']} ({r['prefix_tokens']} tokens "
                 "not prefilled; since start)" if "prefix_hits" in r else "")
              + (f"  first error: {r['first_error']}" if r["first_error"] else ""), flush=True)
        if r.get("busy"):       # the engine thread's time since start (warm-up included)
            b = r["busy"]
            print(f"      engine thread: decode {b.get('decode_s', 0):.1f} s in {b.get('steps', 0)} steps "
                  f"({b.get('rows', 0) / max(1, b.get('steps', 0)):.1f} rows a step, "
                  f"{1e3 * b.get('decode_s', 0) / max(1, b.get('steps', 0)):.1f} ms each), prefill "
                  f"{b.get('prefill_s', 0):.1f} s for {b.get('prefill_tokens', 0)} tokens", flush=True)
    by = {(r["server"], r["shape"]): r["tokens_per_s"] for r in rows}
    if ("ours", ours_shape) in by and ("vllm", anchor_shape) in by:
        print(f"ours ({ours_shape}) / vLLM ({anchor_shape}) tokens/s: "
              f"{by['ours', ours_shape] / by['vllm', anchor_shape]:.2f}x (target >= 0.5x)")
    if ("ours", anchor_shape) in by and ("vllm", anchor_shape) in by:
        print(f"ours / vLLM on the same {anchor_shape} checkpoint: "
              f"{by['ours', anchor_shape] / by['vllm', anchor_shape]:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
