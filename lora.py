"""LoRA for model.py: adapters on every linear layer, many named adapters on one frozen base.

Each target nn.Linear (families.py's `lora_targets`) becomes a `LoRALinear` that keeps the base `weight`/`bias`
under their checkpoint names and adds per-adapter `lora_A[name]` [r, in] (kaiming-uniform, as PEFT) and
`lora_B[name]` [out, r] (zeros: a new adapter equals the base). `set_adapter` picks one adapter, or one per row: a
batch's adapters run stacked, two matmuls a layer whatever their number. Adapters are saved and loaded in PEFT's
format, which vLLM loads as is; training runs a hand-written backward (`_LoRA`), tested against PEFT's gradients.

Left out: dropout on the LoRA path (the recipe uses none), DoRA, rsLoRA initialisation (rsLoRA scaling is honoured
when loading), per-module rank/alpha patterns, LoRA on experts or embeddings.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import threading
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import checkpoint
from families import FAMILIES

PREFIX = "base_model.model."
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)    # ranks vLLM's --max-lora-rank accepts
_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")


class AdapterError(ValueError):
    """An adapter that does not fit this model; the message names the file and the offending key."""


class Routing(threading.local):
    """Shared by every LoRALinear of one model: which adapter(s) the next forward uses. Per thread, so a
    trainer thread and the embedded server's decode thread can use one base model at the same time."""

    def __init__(self):
        self.active = None       # adapter name, or None for the base model
        self.rows = None         # per-row adapter names (batched inference), or None
        self.order = ()          # the distinct adapters of `rows`, in first-seen order
        self.masks = {}          # this batch's row masks, by layer layout (set_adapter starts a new dict)

    def context_fn(self):
        """torch.utils.checkpoint's context_fn (model.recompute_context): the recomputation routes as this forward
        does. On a GPU autograd recomputes in its own thread, where this per-thread routing is unset: it would
        recompute the base model's layer - a mismatch error, or silently wrong gradients."""
        return contextlib.nullcontext(), self._routed((self.active, self.rows, self.order, self.masks))

    @contextlib.contextmanager
    def _routed(self, state):
        before = (self.active, self.rows, self.order, self.masks)
        self.active, self.rows, self.order, self.masks = state
        try:
            yield
        finally:
            self.active, self.rows, self.order, self.masks = before

    def mask(self, names, ranks, dtype, device):
        """[rows, sum(ranks)]: 1 where a row's adapter owns the stacked column. Made once per batch and layout
        (shared by every layer), so a GPU step copies it to the device once, not once per adapter per layer."""
        key = (names, ranks, dtype, device)
        m = self.masks.get(key)
        if m is None:
            slot = {n: i for i, n in enumerate(names)}
            row = torch.tensor([slot.get(n, -1) for n in self.rows])      # -1: the base, or not in this layer
            col = torch.arange(len(names)).repeat_interleave(torch.tensor(ranks))
            m = self.masks[key] = (row[:, None] == col).to(device=device, dtype=dtype)
        return m


class LoRALinear(nn.Linear):
    """nn.Linear (frozen base, same `weight`/`bias` names) + any number of named low-rank adapters."""

    def __init__(self, base: nn.Linear, routing: Routing):
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.register_parameter("bias", base.bias)
        self.lora_A, self.lora_B = nn.ParameterDict(), nn.ParameterDict()
        self.scaling = {}
        self.routing = routing
        self._stack = None      # (names, dtype, versions, parameters, A, B, ranks): see `stacked`

    def add(self, name, rank, scaling, generator=None):
        w = self.weight    # adapters are kept in fp32 (master weights) whatever the base dtype
        A = torch.empty(rank, self.in_features, device=w.device, dtype=torch.float32)
        nn.init.kaiming_uniform_(A, a=math.sqrt(5), generator=generator)      # PEFT's default init
        self.put(name, nn.Parameter(A), nn.Parameter(torch.zeros(self.out_features, rank, device=w.device,
                                                                 dtype=torch.float32)), scaling)

    def put(self, name, A, B, scaling):
        self.lora_A[name], self.lora_B[name], self.scaling[name] = A, B, scaling
        self._stack = None      # the stacked copy no longer holds this layer's adapters

    def remove(self, name):
        for d in (self.lora_A, self.lora_B, self.scaling):
            if name in d:
                d.pop(name)
        self._stack = None      # (and frees its copy of the adapter now)

    def forward(self, x):
        r = self.routing
        if r.rows is None:
            if r.active in self.scaling:
                A, B = self.lora_A[r.active].to(x.dtype), self.lora_B[r.active].to(x.dtype)
                if torch.is_grad_enabled():
                    return _LoRA.apply(x, self.weight, self.bias, A, B, self.scaling[r.active])
                # no grad (decoding): skip the Function call, ~45 us a layer at batch 4 on CPU
                return _lora_linear(x, self.weight, self.bias, A, B, self.scaling[r.active])[0]
            return F.linear(x, self.weight, self.bias)
        y = F.linear(x, self.weight, self.bias)
        names = tuple(n for n in r.order if n in self.scaling)
        if not names:
            return y
        A, B, ranks = self.stacked(names, x.dtype)
        m = r.mask(names, ranks, x.dtype, x.device)
        # rows are [B*T] flattened tokens (model.py) or [B, T, ...]: view x A^T as [B, T, sum r] for the mask
        xa = x.reshape(-1, x.shape[-1]) @ A.t()
        xa.view(len(r.rows), -1, xa.shape[-1]).mul_(m[:, None])
        y.view(-1, y.shape[-1]).addmm_(xa, B.t())
        return y

    def stacked(self, names, dtype):
        """(A [sum r, in], B * scaling [out, sum r], ranks) of `names`, in x's dtype. Cached until `put`/`remove`
        or an in-place write bumps a parameter's `_version`; never while one trains (fused AdamW writes without
        bumping `_version`): gradients flow through a fresh stack. Writes through `.data` are not seen."""
        c = self._stack
        if c is not None and c[0] == names and c[1] == dtype and c[2] == tuple(p._version for p in c[3]) \
                and not any(p.requires_grad for p in c[3]):     # a few us a layer at 15 adapters
            return c[4:]
        ps = [(self.lora_A[n], self.lora_B[n]) for n in names]
        A = torch.cat([a for a, _ in ps]).to(dtype)
        B = torch.cat([b * self.scaling[n] for n, (_, b) in zip(names, ps)], 1).to(dtype)     # scaled in fp32
        ranks = tuple(a.shape[0] for a, _ in ps)
        flat = [p for ab in ps for p in ab]
        if not any(p.requires_grad for p in flat):
            self._stack = (names, dtype, tuple(p._version for p in flat), flat, A, B, ranks)
        return A, B, ranks


def _lora_linear(x, weight, bias, A, B, s):
    """(y, x as [N, in], x A^T): the LoRA product added into the base output in place (no extra [N, out])."""
    x2 = x.reshape(-1, x.shape[-1])
    xa = x2 @ A.t()
    y = F.linear(x2, weight, bias).addmm_(xa, B.t(), alpha=s)
    return y.view(*x.shape[:-1], y.shape[-1]), x2, xa


class _LoRA(torch.autograd.Function):
    """y = x W^T + b + s (x A^T) B^T for one adapter. Backward: the input gradient is one matmul plus one addmm
    (autograd would add two [N, in] tensors), the scaling touches rank-r tensors only; saves what autograd would."""

    @staticmethod
    def forward(ctx, x, weight, bias, A, B, s):
        y, x2, xa = _lora_linear(x, weight, bias, A, B, s)
        ctx.save_for_backward(x2, weight, A, B, xa)
        ctx.s, ctx.shape = s, x.shape
        return y

    @staticmethod
    def backward(ctx, g):
        x, weight, A, B, xa = ctx.saved_tensors
        g = g.reshape(-1, g.shape[-1])
        gb = (g @ B).mul_(ctx.s)                                       # [N, r]
        need = ctx.needs_input_grad
        gx = (g @ weight).addmm_(gb, A).view(ctx.shape) if need[0] else None
        gw = g.t() @ x if need[1] else None                            # only if the base is unfrozen
        gbias = g.sum(0) if need[2] else None
        gA = gb.t() @ x if need[3] else None
        gB = (g.t() @ xa).mul_(ctx.s) if need[4] else None
        return gx, gw, gbias, gA, gB, None


# ----------------------------------------------------------------------------- adding / removing

def lora_layers(model) -> dict:
    return {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}


def _wrap(model) -> dict:
    """Swap every target nn.Linear for a LoRALinear (once); returns {module name: LoRALinear}."""
    if not hasattr(model, "lora_routing"):
        model.lora_routing, model.lora_config = Routing(), {}
        model.recompute_context = model.lora_routing.context_fn
        targets = set(FAMILIES[model.config.model_type].lora_targets)
        for name, mod in list(model.named_modules()):
            if type(mod) is nn.Linear and name.rsplit(".", 1)[-1] in targets and name != "lm_head":
                parent, leaf = name.rsplit(".", 1)
                setattr(model.get_submodule(parent), leaf, LoRALinear(mod, model.lora_routing))
        model.requires_grad_(False)
    return lora_layers(model)


def add_lora(model, rank=None, alpha=None, adapters=("default",), seed=None):
    """Add fresh adapters (B = 0, so each equals the base model) on every target layer. The base stays
    frozen; only LoRA parameters require gradients. Returns the model. rank and alpha are the run's (train.py's
    table: 32 / 32 in the recipe), never defaulted here; adapters=() only makes the model LoRA-ready."""
    if isinstance(adapters, str):
        adapters = (adapters,)
    if adapters and not (isinstance(rank, int) and rank > 0 and isinstance(alpha, (int, float)) and alpha > 0):
        raise ValueError(f"add_lora: rank and alpha must be given and positive (got rank={rank!r}, alpha={alpha!r})")
    layers = _wrap(model)
    for name in adapters:
        _check_new(model, name)
        g = None if seed is None else torch.Generator(model.device).manual_seed(seed)    # the global RNG untouched
        for mod in layers.values():
            mod.add(name, rank, alpha / rank, g)
        model.lora_config[name] = {"r": rank, "lora_alpha": alpha, "use_rslora": False}
    return model


def _check_new(model, name, replace=False):
    if not isinstance(name, str) or not _NAME.match(name):
        raise AdapterError(f"adapter name {name!r}: use letters, digits, '-' and '_' only")
    if name in getattr(model, "lora_config", {}) and not replace:
        raise AdapterError(f"adapter {name!r} is already loaded; remove it first or pick a new name")


def remove_adapter(model, name):
    """Drop one adapter everywhere; the others are untouched."""
    if name not in getattr(model, "lora_config", {}):
        raise AdapterError(f"no adapter named {name!r} (loaded: {', '.join(adapter_names(model)) or 'none'})")
    for mod in lora_layers(model).values():
        mod.remove(name)
    del model.lora_config[name]
    r = model.lora_routing
    if r.active == name:
        r.active = None


def adapter_names(model) -> list:
    return list(getattr(model, "lora_config", {}))


def set_adapter(model, adapter):
    """adapter: a name (every row), None (the base model), or a list with one name-or-None per row."""
    r = getattr(model, "lora_routing", None)
    names = adapter if isinstance(adapter, (list, tuple)) else [adapter]
    unknown = [n for n in names if n is not None and n not in getattr(model, "lora_config", {})]
    if unknown:
        raise AdapterError(f"unknown adapter {unknown[0]!r} (loaded: {', '.join(adapter_names(model)) or 'none'})")
    if r is None:
        return
    if isinstance(adapter, (list, tuple)):
        r.active, r.rows = None, list(adapter)
        r.order, r.masks = tuple(dict.fromkeys(n for n in adapter if n is not None)), {}
    else:
        r.active, r.rows = adapter, None


def lora_parameters(model, adapter) -> list:
    """The trainable tensors of one adapter (for its optimizer)."""
    out = []
    for mod in lora_layers(model).values():
        if adapter in mod.lora_A:
            out += [mod.lora_A[adapter], mod.lora_B[adapter]]
    return out


# ----------------------------------------------------------------------------- PEFT format

def adapter_state(model, adapter) -> dict:
    """PEFT keys -> tensors for one adapter."""
    sd = {}
    for name, mod in lora_layers(model).items():
        if adapter in mod.lora_A:
            sd[f"{PREFIX}{name}.lora_A.weight"] = mod.lora_A[adapter].detach()
            sd[f"{PREFIX}{name}.lora_B.weight"] = mod.lora_B[adapter].detach()
    return sd


def snapshot(model, adapter, base_model_name_or_path=None) -> tuple:
    """(PEFT adapter_config dict, PEFT-key tensors) of one adapter, the tensors cloned: a consistent copy
    that later training steps do not change (written to disk or installed as another adapter)."""
    if adapter not in getattr(model, "lora_config", {}):
        raise AdapterError(f"no adapter named {adapter!r} (loaded: {', '.join(adapter_names(model)) or 'none'})")
    c = model.lora_config[adapter]
    sd = {k: v.clone() for k, v in adapter_state(model, adapter).items()}
    targets = sorted({k[len(PREFIX):].split(".lora_")[0].rsplit(".", 1)[-1] for k in sd})
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": c["r"], "lora_alpha": c["lora_alpha"],
        "target_modules": targets, "bias": "none", "lora_dropout": 0.0, "use_rslora": c["use_rslora"],
        "use_dora": False, "fan_in_fan_out": False, "modules_to_save": None, "init_lora_weights": True,
        "inference_mode": True, "rank_pattern": {}, "alpha_pattern": {},
        "base_model_name_or_path": base_model_name_or_path or getattr(model, "name_or_path", None),
    }
    return config, sd


def save_adapter(model, dir, adapter="default", base_model_name_or_path=None):
    """Write `adapter` in PEFT format to `dir` atomically (a temp dir renamed into place)."""
    return write_adapter(dir, *snapshot(model, adapter, base_model_name_or_path))


def write_adapter(dir, config, sd, texts=None):
    """Write a snapshot (config, PEFT-key tensors) as a PEFT adapter directory, atomically; texts: more files
    beside them ({"README.md": its model card}, hub.card)."""
    from safetensors.torch import save_file

    with checkpoint.atomic_dir(dir, replace=True) as tmp:     # a crash leaves one complete copy
        save_file({k: v.contiguous().cpu() for k, v in sd.items()}, str(tmp / "adapter_model.safetensors"),
                  metadata={"format": "pt"})
        (tmp / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
        for name, text in (texts or {}).items():
            (tmp / name).write_text(text)
    return Path(dir)


def read_adapter(dir) -> tuple:
    """(config dict, PEFT-key tensors), with the format checks vLLM makes."""
    from safetensors.torch import load_file

    dir = Path(dir)
    cf = dir / "adapter_config.json"
    cfg = checkpoint.read_json(cf, AdapterError, "a PEFT LoRA adapter directory")
    for key, ok, want in (("peft_type", lambda v: v in ("LORA", None), "LORA"),
                          ("bias", lambda v: v in ("none", None), "none"),
                          ("use_dora", lambda v: not v, "false"),
                          ("r", lambda v: isinstance(v, int) and v > 0, "a positive integer"),
                          ("rank_pattern", lambda v: not v, "empty"), ("alpha_pattern", lambda v: not v, "empty"),
                          ("modules_to_save", lambda v: not v, "null")):
        if not ok(cfg.get(key)):
            raise AdapterError(f"{cf}: {key} = {cfg.get(key)!r} is not supported (must be {want})")
    wf = dir / "adapter_model.safetensors"
    if not wf.is_file():
        if (dir / "adapter_model.bin").is_file():
            raise AdapterError(f"{dir}: adapter_model.bin (pickle) is not read; save it as safetensors")
        raise AdapterError(f"{dir}: no adapter_model.safetensors")
    try:
        return cfg, load_file(str(wf))
    except Exception as e:
        raise AdapterError(f"{wf}: not a readable safetensors file: {e}") from None


def load_adapter(model, dir, adapter="default"):
    """Load a PEFT-format LoRA adapter (ours or PEFT's) from `dir` under the name `adapter`. Every key and
    shape is checked first: a non-fitting adapter raises AdapterError naming the key; nothing is added."""
    cfg, sd = read_adapter(dir)
    return install_adapter(model, cfg, sd, adapter, where=Path(dir) / "adapter_model.safetensors")


def install_adapter(model, cfg, sd, adapter, where="adapter", replace=False):
    """Add an adapter from (PEFT config, PEFT-key tensors) - a file's or a `snapshot` - as `adapter`, after
    `load_adapter`'s checks (`where` names the source in errors), copied to fp32 on the model's device.
    replace=True swaps out a same-named adapter only once the new one passed every check."""
    _check_new(model, adapter, replace)
    layers = _wrap(model)
    r = cfg.get("r")
    if not isinstance(r, int) or isinstance(r, bool) or r <= 0:
        raise AdapterError(f"{where}: adapter_config.json r = {r!r} (must be a positive integer)")
    alpha = cfg.get("lora_alpha", r)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha) or alpha <= 0:
        raise AdapterError(f"{where}: adapter_config.json lora_alpha = {alpha!r} (must be a positive number)")
    scaling = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    pairs = {}
    for key, t in sd.items():
        m = re.fullmatch(re.escape(PREFIX) + r"(.+)\.lora_([AB])(?:\.[A-Za-z0-9_\-]+)?\.weight", key)
        if not m:
            raise AdapterError(f"{where}: key {key!r} is not a LoRA A/B weight "
                               "(base_model.model.<module>.lora_A.weight)")
        mod_name, ab = m.groups()
        if mod_name not in layers:
            what = "not a module of this model (an adapter for another base?)" \
                if mod_name not in dict(model.named_modules()) else \
                "not a LoRA target (targets: " + ", ".join(FAMILIES[model.config.model_type].lora_targets) + ")"
            raise AdapterError(f"{where}: key {key!r}: {mod_name} is {what}")
        pairs.setdefault(mod_name, {})[ab] = t
    for mod_name, ab in pairs.items():
        lin = layers[mod_name]
        if set(ab) != {"A", "B"}:
            raise AdapterError(f"{where}: {mod_name} has lora_{''.join(ab)} but not its pair")
        A, B = ab["A"], ab["B"]
        rank = A.shape[0]
        if A.dim() != 2 or A.shape[1] != lin.in_features or B.dim() != 2 or B.shape[0] != lin.out_features \
                or B.shape[1] != rank:
            raise AdapterError(f"{where}: {PREFIX}{mod_name}: lora_A {tuple(A.shape)} / lora_B {tuple(B.shape)} do "
                               f"not fit a {lin.in_features}->{lin.out_features} layer (other base model?)")
        if rank != r:      # (a rank above min(in, out) is legal, as in PEFT: LFM3's 16-wide g_proj at r=32)
            raise AdapterError(f"{where}: {PREFIX}{mod_name}: rank {rank} does not match adapter_config.json r={r}")
    if not pairs:
        raise AdapterError(f"{where}: no LoRA weights in the file")
    dev = model.lm_head.weight.device
    if adapter in model.lora_config:       # replace=True, and the new one is sound
        remove_adapter(model, adapter)
    for mod_name, ab in pairs.items():     # all checked: now add (fp32, like adapters made here)
        layers[mod_name].put(adapter, nn.Parameter(ab["A"].to(dev, torch.float32), requires_grad=False),
                             nn.Parameter(ab["B"].to(dev, torch.float32), requires_grad=False), scaling)
    model.lora_config[adapter] = {"r": r, "lora_alpha": alpha, "use_rslora": bool(cfg.get("use_rslora"))}
    return model


# ----------------------------------------------------------------------------- merging

def merged_weight(lin: LoRALinear, adapter) -> torch.Tensor:
    if adapter not in lin.lora_A:
        return lin.weight.detach()
    A, B = lin.lora_A[adapter].detach().float(), lin.lora_B[adapter].detach().float()
    return (lin.weight.detach().float() + lin.scaling[adapter] * (B @ A)).to(lin.weight.dtype)


def merge_adapter(model, adapter="default"):
    """Fold `adapter` into the base weights in place and drop it (the base changes for every adapter)."""
    if adapter not in getattr(model, "lora_config", {}):
        raise AdapterError(f"no adapter named {adapter!r}")
    with torch.no_grad():
        for lin in lora_layers(model).values():
            lin.weight.copy_(merged_weight(lin, adapter))
    remove_adapter(model, adapter)
    return model


def save_merged(model, base_dir, out_dir, adapter="default"):
    """Write base + adapter as a plain checkpoint in the base's format (config, tokenizer files copied),
    leaving the live model unchanged."""
    from safetensors.torch import save_file

    base_dir, out_dir = checkpoint.resolve_model(base_dir), Path(out_dir)
    with torch.no_grad():
        merged = {f"{n}.weight": merged_weight(lin, adapter) for n, lin in lora_layers(model).items()}
        sd = checkpoint.hf_state_dict(model, overrides=merged)
    with checkpoint.atomic_dir(out_dir, replace=True) as tmp:
        for f in base_dir.iterdir():
            if f.is_file() and not f.name.startswith("model") and f.suffix in (".json", ".jinja", ".txt", ".model"):
                shutil.copy(f, tmp / f.name)
        save_file({k: v.contiguous().cpu() for k, v in sd.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
    return out_dir
