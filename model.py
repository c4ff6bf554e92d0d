"""The models: LFM2, LFM2-MoE, LFM3 and a dense llama/qwen3-style family, in plain PyTorch.

What it does
- `load_model(path)` reads a Hugging Face checkpoint (single file or sharded safetensors) straight into
  modules whose names mirror the checkpoint's, so a state-dict key is a PEFT/vLLM adapter key too.
- `CausalLM.forward(input_ids, position_ids, cache)` is padding-free: several sequences packed into one
  row (position_ids restarting at 0) give exactly the logits of separate runs. Attention runs per
  sequence segment with SDPA (sliding windows in blocks, never a T x T mask); the short convolution
  is reset at boundaries by spacing segments apart with zeros before one conv1d call.
  Shared prefixes (tree packing, grpo.pack): a segment starting at p > 0 is a branch of the row's last
  segment that started at 0 and reuses that root's first p tokens - its queries attend to the root's
  keys below p (a [branch, p + branch] mask, or query blocks when large), its convolution starts from
  the root's inputs at p-(L-1)..p-1 - so 8 rollouts of one prompt compute the prompt once, with the
  logits of 8 separate runs. One level: a branch of a branch is not expressible (see find_segments).
- `new_cache(batch_size)` + incremental decoding (KV cache, sliding window mask, conv state),
  `generate` (temperature / top-p, seeded), `resolve_model` (HF cache lookup; GGUF files and names
  through checkpoint.py). Tiny random checkpoints: tiny.py.

What it leaves out: training-time dropout, other RoPE scalings than default/linear/llama3/proportional,
vision towers, tensor parallelism (FSDP2 wraps these modules from the outside), fused kernels, branches
in the decoding cache (a cache row is one sequence).
"""
from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from checkpoint import CheckpointError   # the project's checkpoint.py (it never imports this file); re-exported

FAMILIES = ("lfm2", "lfm2_moe", "lfm3", "llama", "qwen3")
# Short names users type -> Hugging Face repo ids (resolve_model); "org/name" also works directly.
MODEL_REPOS = {
    "LFM3-1.7B": "LiquidAI/LFM3-1.7B",
    "LFM2.5-24B-A2B": "LiquidAI/LFM2.5-24B-A2B",
    "LFM2-24B-A2B": "LiquidAI/LFM2-24B-A2B",
    "LFM2-1.2B": "LiquidAI/LFM2-1.2B",
}


# ----------------------------------------------------------------------------- config

@dataclass
class Config:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int            # effective FFN width (LFM2 width rule already applied)
    layer_types: list                 # "conv" | "full_attention" | "sliding_attention" per layer
    rope: dict                        # layer type -> {"rope_type", "rope_theta", ...}
    norm_eps: float = 1e-5
    tie_word_embeddings: bool = True
    conv_L_cache: int = 3
    conv_bias: bool = False
    sliding_window: int | None = None
    attention_bias: bool = False
    mlp_bias: bool = False
    sandwich_norm: bool = False       # LFM3 post_operator_norm / post_ffn_norm
    attention_gate: bool = False      # LFM3 g_proj
    qk_norm: bool = True
    num_dense_layers: int = 0         # LFM2-MoE
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    use_expert_bias: bool = True
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0
    eos_token_id: object = None
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def lfm(self):
        return self.model_type.startswith("lfm")

    @classmethod
    def from_dict(cls, d: dict, source: str = "config.json") -> "Config":
        mt = d.get("model_type")
        if mt not in FAMILIES:
            raise CheckpointError(f"{source}: model_type {mt!r} is not supported; supported: {', '.join(FAMILIES)}")

        def need(key, *alts):
            for k in (key, *alts):
                if d.get(k) is not None:
                    return d[k]
            raise CheckpointError(f"{source}: missing required field {key!r}")

        try:
            H, L, nh = int(need("hidden_size")), int(need("num_hidden_layers")), int(need("num_attention_heads"))
            nkv = int(d.get("num_key_value_heads") or nh)
            head_dim = int(d.get("head_dim") or H // nh)
            ff = int(need("intermediate_size", "block_ff_dim") if d.get("block_ff_dim") is None else d["block_ff_dim"])
            if mt == "lfm2" and d.get("block_auto_adjust_ff_dim", True):   # LFM2's width rule
                ff = int(2 * ff / 3)
                if d.get("block_ffn_dim_multiplier", 1.0) is not None:
                    ff = int(d.get("block_ffn_dim_multiplier", 1.0) * ff)
                    m = int(d.get("block_multiple_of", 256))
                    ff = m * ((ff + m - 1) // m)
            layer_types = d.get("layer_types")
            if layer_types is None:
                if mt == "lfm3":
                    layer_types = ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0
                                   else "conv" for i in range(L)]
                elif mt.startswith("lfm2"):
                    idx = d.get("full_attn_idxs")
                    idx = set(range(L) if idx is None else idx)
                    layer_types = ["full_attention" if i in idx else "conv" for i in range(L)]
                else:
                    layer_types = ["full_attention"] * L
            layer_types = list(layer_types)
            if len(layer_types) != L or not set(layer_types) <= {"conv", "full_attention", "sliding_attention"}:
                raise CheckpointError(f"{source}: layer_types must list {L} of conv/full_attention/sliding_attention")
            if not mt.startswith("lfm") and "conv" in layer_types:
                raise CheckpointError(f"{source}: a {mt} model has no conv layers")
            cfg = cls(
                model_type=mt, vocab_size=int(need("vocab_size")), hidden_size=H, num_hidden_layers=L,
                num_attention_heads=nh, num_key_value_heads=nkv, head_dim=head_dim, intermediate_size=ff,
                layer_types=layer_types, rope=_rope_params(d, mt, layer_types, source),
                norm_eps=float(d.get("norm_eps", d.get("rms_norm_eps", 1e-5 if mt.startswith("lfm") else 1e-6))),
                tie_word_embeddings=bool(d.get("tie_word_embeddings", d.get("tie_embedding", mt.startswith("lfm")))),
                conv_L_cache=int(d.get("conv_L_cache", 7 if mt == "lfm3" else 3)),
                conv_bias=bool(d.get("conv_bias", False)),
                sliding_window=d.get("sliding_window", 256 if mt == "lfm3" else None),
                attention_bias=bool(d.get("attention_bias", False)), mlp_bias=bool(d.get("mlp_bias", False)),
                sandwich_norm=mt == "lfm3" and bool(d.get("use_sandwich_norm", True)),
                attention_gate=mt == "lfm3" and bool(d.get("use_attention_gate", True)),
                qk_norm=mt != "llama",
                num_dense_layers=int(d.get("num_dense_layers", 2)) if mt == "lfm2_moe" else 0,
                num_experts=int(d.get("num_experts", 32)) if mt == "lfm2_moe" else 0,
                num_experts_per_tok=int(d.get("num_experts_per_tok", 4)) if mt == "lfm2_moe" else 0,
                moe_intermediate_size=int(d.get("moe_intermediate_size", 1792)) if mt == "lfm2_moe" else 0,
                use_expert_bias=bool(d.get("use_expert_bias", True)),
                norm_topk_prob=bool(d.get("norm_topk_prob", True)),
                routed_scaling_factor=float(d.get("routed_scaling_factor") or 1.0),
                eos_token_id=d.get("eos_token_id"), raw=d)
        except (TypeError, ValueError) as e:
            if isinstance(e, CheckpointError):
                raise
            raise CheckpointError(f"{source}: bad value: {e}") from None
        if nh % nkv or H <= 0 or head_dim <= 0:
            raise CheckpointError(f"{source}: num_attention_heads {nh} is not a multiple of num_key_value_heads {nkv}")
        if "sliding_attention" in layer_types and not cfg.sliding_window:
            raise CheckpointError(f"{source}: sliding_attention layers need sliding_window")
        return cfg


def _rope_params(d, mt, layer_types, source):
    """Per attention layer type, the RoPE parameters, read the way transformers reads this family's config."""
    rp = d.get("rope_parameters") or d.get("rope_scaling") or {}
    theta = d.get("rope_theta")
    default_theta = 1e6 if mt.startswith("lfm") else 10000.0
    out = {}
    for lt in ("full_attention", "sliding_attention"):
        if lt not in layer_types:
            continue
        if mt == "lfm3" and not rp and theta is None:
            p = ({"rope_type": "default", "rope_theta": 1e4} if lt == "sliding_attention" else
                 {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.5})
        elif isinstance(rp.get(lt), dict):
            p = dict(rp[lt])
        else:
            p = dict(rp)
        p["rope_type"] = p.get("rope_type", p.get("type", "default"))
        p["rope_theta"] = float(p.get("rope_theta", theta if theta is not None else default_theta))
        if d.get("partial_rotary_factor") is not None:
            p.setdefault("partial_rotary_factor", d["partial_rotary_factor"])
        if p["rope_type"] not in ("default", "linear", "llama3", "proportional"):
            raise CheckpointError(f"{source}: rope_type {p['rope_type']!r} is not supported "
                                  "(supported: default, linear, llama3, proportional)")
        if p["rope_type"] == "llama3":
            p.setdefault("original_max_position_embeddings", d.get("max_position_embeddings", 8192))
        out[lt] = p
    return out


def rope_inv_freq(p: dict, head_dim: int, model_type: str) -> torch.Tensor:
    """Inverse frequencies over head_dim/2 rotation pairs (fp32), as transformers computes them."""
    base, kind = p["rope_theta"], p["rope_type"]
    if kind == "proportional":      # the first fraction of pairs rotates, the rest gets frequency 0
        n = int(p.get("partial_rotary_factor", 1.0) * head_dim // 2)
        inv = 1.0 / base ** (torch.arange(0, 2 * n, 2, dtype=torch.float) / head_dim)
        return torch.cat([inv, torch.zeros(head_dim // 2 - n)]) / p.get("factor", 1.0)
    # LFM families rotate the full head even when partial_rotary_factor is set (transformers' reading)
    partial = 1.0 if model_type.startswith("lfm") else p.get("partial_rotary_factor", 1.0)
    if partial != 1.0:
        raise CheckpointError(f"partial_rotary_factor {partial} is only supported with rope_type 'proportional'")
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim)
    if kind == "linear":
        inv = inv / p["factor"]
    elif kind == "llama3":
        factor, lo, hi = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
        old = p["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        mid = (wavelen >= old / hi) & (wavelen <= old / lo)
        inv = torch.where(mid, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    return inv


# ----------------------------------------------------------------------------- layers

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        if torch.is_grad_enabled():
            return _RMSNorm.apply(x, self.weight, self.eps)
        return _rms_norm(x, self.weight, self.eps)[0]     # no grad (decoding): skip the Function call


def _rms_norm(x, weight, eps):
    """(weight * normalised x, rstd [..., 1] in fp32)."""
    xf = _up(x)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True).add_(eps))
    return weight * (xf * rstd).to(x.dtype), rstd


class _RMSNorm(torch.autograd.Function):
    """weight * (x * rsqrt(mean(x^2) + eps)).to(x.dtype), normalised in fp32 with HF's order of rounding.
    The hand-written backward makes four passes over [N, H] where autograd's chain of seven ops makes
    about ten; it saves x and the [N, 1] rstd (autograd kept x, x^2 and the normalised x)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = _rms_norm(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, g):
        x, weight, rstd = ctx.saved_tensors
        xf, dx, dw = _up(x), None, None
        if ctx.needs_input_grad[0]:
            gn = _up(g * weight)                                # gradient w.r.t. the normalised x
            coef = (gn * xf).mean(-1, keepdim=True).mul_(rstd.pow(3))
            dx = torch.addcmul(gn * rstd, xf, coef, value=-1).to(x.dtype)
        if ctx.needs_input_grad[1]:
            n = (xf * rstd).to(x.dtype)
            dw = (g * n).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
        return dx, dw, None


def _up(x):
    """x in at least fp32 (half types are upcast; fp64 stays fp64, for gradcheck)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def rotate(x, cos, sin):
    """Rotate-half RoPE in fp32; x [..., T, heads, D], cos/sin [..., T, 1, D]."""
    xf = x.float()
    x1, x2 = xf.chunk(2, dim=-1)
    return (xf * cos + torch.cat((-x2, x1), dim=-1) * sin).to(x.dtype)


@dataclass
class Segments:
    """Where packed sequences start, from position_ids; computed once per forward.

    A segment starts wherever position_ids do not continue by +1. One that starts at 0 (or at a row's first
    token) is a sequence of its own. One that starts at p > 0 inside a row is a *branch* of the row's most
    recent segment that started at 0, its root: it shares the root's first p tokens (positions 0..p-1), so
    it attends to the root's keys/values at positions < p, and its short convolution sees the root's inputs
    at positions p-(L-1)..p-1 before its first token. Its logits are those of root[:p] + branch run alone."""
    lengths: list            # segment lengths, in order over the flattened [B*T] token stream
    seg_id: torch.Tensor     # [B*T] segment index of every token
    uniform: bool            # exactly one segment per row (a plain batch): batched fast path
    starts: list = None      # flat offset of each segment's first token
    root: list = None        # per segment: index of the segment it branches from, or None
    shared: list = None      # per segment: how many root tokens it shares (its first position), 0 if none
    branched: bool = False   # any branch at all (else the plain per-segment path)
    _fill: dict = field(default_factory=dict, repr=False)   # packed_conv's branch padding indices, per (L, device)


def find_segments(position_ids: torch.Tensor) -> Segments:
    """Segments of a packed [B, T] batch (see Segments). Raises ValueError for a branch with no root before
    it in its row, or whose root is shorter than the p tokens it shares."""
    B, T = position_ids.shape
    start = torch.ones_like(position_ids, dtype=torch.bool)
    start[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
    start = start.flatten()
    seg_id = torch.cumsum(start.long(), 0) - 1
    where = torch.nonzero(start).flatten()
    idx, first = torch.stack([where, position_ids.flatten()[where]]).tolist()    # one device sync
    lengths = [b - a for a, b in zip(idx, idx[1:] + [B * T])]
    seg = Segments(lengths, seg_id, uniform=len(lengths) == B, starts=idx)
    if len(lengths) == B or not any(first):
        return seg
    root, shared, r = [None] * len(idx), [0] * len(idx), None
    for i, (s, p) in enumerate(zip(idx, first)):
        if s % T == 0:                    # a row's first segment is never a branch
            r = i if p == 0 else None
        elif p == 0:
            r = i
        else:
            if r is None or p > lengths[r]:
                raise ValueError(f"position_ids: the segment at row {s // T}, column {s % T} starts at position "
                                 f"{p}, a branch, but " + ("no segment starting at 0 precedes it in its row"
                                                           if r is None else f"its root has only {lengths[r]} tokens"))
            root[i], shared[i], seg.branched = r, p, True
    seg.root, seg.shared = root, shared
    return seg


def segment_attention(q, k, v, seg: Segments, B, window):
    """Causal (optionally sliding-window) attention per packed segment. q [N,h,D], k/v [N,hkv,D]. A branch
    attends to its root's first `shared` keys (those in the window) and causally to itself."""
    if seg.uniform:   # one sequence per row: a single batched call
        T = q.shape[0] // B
        qb, kb, vb = (t.view(B, T, *t.shape[1:]).transpose(1, 2) for t in (q, k, v))
        return _causal(qb, kb, vb, window).transpose(1, 2).reshape(q.shape)
    outs, s = [], 0
    for i, n in enumerate(seg.lengths):
        if seg.branched and seg.shared[i]:
            p, r = seg.shared[i], seg.starts[seg.root[i]]
            lo = 0 if window is None else max(0, p - window + 1)     # root keys the first query can still see
            qs = q[s:s + n].transpose(0, 1).unsqueeze(0)
            ks, vs = (torch.cat([t[r + lo:r + p], t[s:s + n]]).transpose(0, 1).unsqueeze(0) for t in (k, v))
            outs.append(_prefixed(qs, ks, vs, p - lo, window)[0].transpose(0, 1))
        else:
            qs, ks, vs = (t[s:s + n].transpose(0, 1).unsqueeze(0) for t in (q, k, v))
            outs.append(_causal(qs, ks, vs, window)[0].transpose(0, 1))
        s += n
    return torch.cat(outs, 0)


MASK_ELEMENTS = 1 << 24    # a branch's [queries, keys] mask is built in query blocks of at most this many


def _prefixed(q, k, v, p, window):
    """q [1,h,n,D] are the keys' last n positions (k/v [1,hkv,p+n,D]: p keys before them, then their own):
    each query sees every key up to itself, within `window` when given. Masks are [block, keys]: the whole
    [n, p+n] at once when it is small, else query blocks (of `window` for sliding layers)."""
    n, K = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    blk = window if window is not None else max(1, MASK_ELEMENTS // K)
    outs = []
    for s in range(0, n, blk):
        e = min(s + blk, n)
        ks = 0 if window is None else max(0, p + s - window + 1)
        qi = torch.arange(p + s, p + e, device=q.device)[:, None]
        ki = torch.arange(ks, p + e, device=q.device)[None, :]
        mask = ki <= qi
        if window is not None:
            mask = mask & (ki > qi - window)
        outs.append(F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, ks:p + e], v[:, :, ks:p + e],
                                                   attn_mask=mask, enable_gqa=gqa))
    return torch.cat(outs, 2)


def _causal(q, k, v, window):
    """q [B,h,T,D]; keys see themselves and the past, within `window` tokens when given."""
    T = q.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if window is None or T <= window:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    # Sliding window in query blocks of `window`: each block sees at most 2*window-1 keys (no T x T mask).
    W, outs = window, []
    for s in range(0, T, W):
        e = min(s + W, T)
        ks = max(0, s - W + 1)
        qi = torch.arange(s, e, device=q.device)[:, None]
        ki = torch.arange(ks, e, device=q.device)[None, :]
        mask = (ki <= qi) & (ki > qi - W)
        outs.append(F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, ks:e], v[:, :, ks:e],
                                                   attn_mask=mask, enable_gqa=gqa))
    return torch.cat(outs, 2)


class Attention(nn.Module):
    def __init__(self, cfg: Config, layer_type: str):
        super().__init__()
        H, h, hkv, D = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        b = cfg.attention_bias
        self.h, self.hkv, self.D, self.layer_type = h, hkv, D, layer_type
        self.window = cfg.sliding_window if layer_type == "sliding_attention" else None
        self.q_proj = nn.Linear(H, h * D, bias=b)
        self.k_proj = nn.Linear(H, hkv * D, bias=b)
        self.v_proj = nn.Linear(H, hkv * D, bias=b)
        # checkpoint names: LFM2 out_proj + q/k_layernorm; LFM3 and dense o_proj + q/k_norm
        self.out_name = "out_proj" if cfg.model_type.startswith("lfm2") else "o_proj"
        setattr(self, self.out_name, nn.Linear(h * D, H, bias=b))
        self.norm_names = ("q_layernorm", "k_layernorm") if cfg.model_type.startswith("lfm2") else ("q_norm", "k_norm")
        if cfg.qk_norm:
            for n in self.norm_names:
                setattr(self, n, RMSNorm(D, cfg.norm_eps))
        self.qk_norm = cfg.qk_norm
        self.g_proj = nn.Linear(H, h, bias=False) if cfg.attention_gate else None

    def forward(self, x, rope, seg, B, cache=None, layer=None):
        N = x.shape[0]
        q = self.q_proj(x).view(N, self.h, self.D)
        k = self.k_proj(x).view(N, self.hkv, self.D)
        v = self.v_proj(x).view(N, self.hkv, self.D)
        if self.qk_norm:
            q, k = getattr(self, self.norm_names[0])(q), getattr(self, self.norm_names[1])(k)
        cos, sin = rope
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache is None:
            o = segment_attention(q, k, v, seg, B, self.window)
        else:
            o = cache.attend(layer, q, k, v, self.window, seg, B)
        if self.g_proj is not None:
            o = o * torch.sigmoid(self.g_proj(x)).unsqueeze(-1)
        return getattr(self, self.out_name)(o.reshape(N, self.h * self.D))


class ShortConv(nn.Module):
    """LFM2's gated short convolution: out_proj(C * causal_depthwise_conv(B * x))."""

    def __init__(self, cfg: Config):
        super().__init__()
        H, L = cfg.hidden_size, cfg.conv_L_cache
        self.L = L
        self.in_proj = nn.Linear(H, 3 * H, bias=cfg.conv_bias)
        self.out_proj = nn.Linear(H, H, bias=cfg.conv_bias)
        self.conv = nn.Conv1d(H, H, L, groups=H, bias=cfg.conv_bias)   # weight [H, 1, L]; only its tensors are used

    def forward(self, x, seg, B, cache=None, layer=None):
        Bg, C, xx = self.in_proj(x).chunk(3, dim=-1)
        bx = Bg * xx                                                   # [N, H]
        if cache is not None:
            y = cache.conv(layer, bx, self.conv.weight, self.conv.bias, B)
        else:
            y = packed_conv(bx, self.conv.weight, self.conv.bias, seg)
        return self.out_proj(C * y)


def packed_conv(bx, weight, bias, seg: Segments):
    """Causal depthwise conv over a packed token stream [N, H] that never crosses a segment boundary.
    Every segment is preceded by L-1 zeros (the causal padding it would have alone), then one conv1d; a
    branch's L-1 slots hold its root's inputs at positions p-(L-1)..p-1 instead (zeros below position 0)."""
    N, H = bx.shape
    L = weight.shape[-1]
    dest = torch.arange(N, device=bx.device) + (seg.seg_id + 1) * (L - 1)
    padded = bx.new_zeros(N + len(seg.lengths) * (L - 1), H).index_copy(0, dest, bx)
    if seg.branched and L > 1:
        src, dst = _branch_fill(seg, L, bx.device)
        if len(src):
            padded = padded.index_copy(0, dst, bx.index_select(0, src))
    out = F.conv1d(padded.t().unsqueeze(0), weight, bias, groups=H)[0].t()   # [N', H]
    return out.index_select(0, dest - (L - 1))


def _branch_fill(seg: Segments, L, device):
    """(root token indices, padding slots) for every branch's conv padding, computed once per forward."""
    key = (L, device)
    if key not in seg._fill:
        src, dst = [], []
        for i, p in enumerate(seg.shared):
            if p:
                r, pad = seg.starts[seg.root[i]], seg.starts[i] + i * (L - 1)    # segment i's first pad slot
                for j in range(max(0, L - 1 - p), L - 1):
                    src.append(r + p - (L - 1) + j)
                    dst.append(pad + j)
        seg._fill[key] = tuple(torch.tensor(x, dtype=torch.long, device=device) for x in (src, dst))
    return seg._fill[key]


class MLP(nn.Module):
    """SwiGLU: LFM names w1 (gate) / w3 (up) / w2 (down); dense names gate_proj / up_proj / down_proj."""

    def __init__(self, cfg: Config, ff: int):
        super().__init__()
        H, b = cfg.hidden_size, cfg.mlp_bias
        self.names = ("w1", "w3", "w2") if cfg.lfm else ("gate_proj", "up_proj", "down_proj")
        setattr(self, self.names[0], nn.Linear(H, ff, bias=b))
        setattr(self, self.names[1], nn.Linear(H, ff, bias=b))
        setattr(self, self.names[2], nn.Linear(ff, H, bias=b))

    def forward(self, x):
        g, u, d = (getattr(self, n) for n in self.names)
        return d(F.silu(g(x)) * u(x))


class Experts(nn.Module):
    """The routed experts, stacked: w1/w3 [E, I, H], w2 [E, H, I] (on disk: experts.{e}.w1.weight ...)."""

    def __init__(self, E, H, I):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(E, I, H))
        self.w3 = nn.Parameter(torch.empty(E, I, H))
        self.w2 = nn.Parameter(torch.empty(E, H, I))


class MoE(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        E, H = cfg.num_experts, cfg.hidden_size
        self.k, self.norm_topk, self.scale = cfg.num_experts_per_tok, cfg.norm_topk_prob, cfg.routed_scaling_factor
        self.gate = nn.Linear(H, E, bias=False)
        self.experts = Experts(E, H, cfg.moe_intermediate_size)
        self.register_buffer("expert_bias", torch.zeros(E, dtype=torch.float32) if cfg.use_expert_bias else None)

    def forward(self, x):
        logits = self.gate(x)
        scores = logits.sigmoid()
        if self.expert_bias is not None:       # bias only chooses; weights are the unbiased scores
            chosen = torch.topk(scores + self.expert_bias, self.k, dim=-1).indices
            weights = scores.gather(1, chosen).type_as(logits)
        else:
            weights, chosen = torch.topk(scores, self.k, dim=-1)
        if self.norm_topk:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-6)
        weights = weights * self.scale
        out = torch.zeros_like(x)
        ex = self.experts
        flat = chosen.flatten()
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=ex.w1.shape[0]).tolist()
        tok = order // self.k
        w = weights.flatten()[order]
        s = 0
        for e, n in enumerate(counts):   # a loop over experts (not tokens): each gets its tokens in one matmul
            if n:
                t = tok[s:s + n]
                h = x[t]
                y = F.linear(F.silu(F.linear(h, ex.w1[e])) * F.linear(h, ex.w3[e]), ex.w2[e])
                out.index_add_(0, t, (y * w[s:s + n, None]).to(out.dtype))
            s += n
        return out


class Block(nn.Module):
    def __init__(self, cfg: Config, i: int):
        super().__init__()
        self.layer_type = lt = cfg.layer_types[i]
        self.lfm = cfg.lfm
        if lt == "conv":
            self.conv = ShortConv(cfg)
        else:
            self.self_attn = Attention(cfg, lt)
        if cfg.model_type == "lfm2_moe" and i >= cfg.num_dense_layers:
            ffn = MoE(cfg)
        else:
            ffn = MLP(cfg, cfg.intermediate_size)
        # checkpoint names: LFM operator_norm / ffn_norm / feed_forward; dense input_layernorm / ... / mlp
        self.ffn_name = "feed_forward" if cfg.lfm else "mlp"
        self.norm_names = ("operator_norm", "ffn_norm") if cfg.lfm else ("input_layernorm", "post_attention_layernorm")
        setattr(self, self.ffn_name, ffn)
        for n in self.norm_names:
            setattr(self, n, RMSNorm(cfg.hidden_size, cfg.norm_eps))
        self.sandwich = cfg.sandwich_norm
        if cfg.sandwich_norm:
            self.post_operator_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
            self.post_ffn_norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)

    def forward(self, x, rope, seg, B, cache=None, layer=None):
        n1, n2 = (getattr(self, n) for n in self.norm_names)
        if self.layer_type == "conv":
            h = self.conv(n1(x), seg, B, cache, layer)
        else:
            h = self.self_attn(n1(x), rope[self.layer_type], seg, B, cache, layer)
        x = x + (self.post_operator_norm(h) if self.sandwich else h)
        h = getattr(self, self.ffn_name)(n2(x))
        return x + (self.post_ffn_norm(h) if self.sandwich else h)


class Backbone(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.num_hidden_layers))
        # LFM's `embedding_norm` is the final norm (after the last layer), the dense family's `norm`
        self.norm_name = "embedding_norm" if cfg.lfm else "norm"
        setattr(self, self.norm_name, RMSNorm(cfg.hidden_size, cfg.norm_eps))


class CausalLM(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.config = cfg
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.gradient_checkpointing = False   # per-layer activation checkpointing while training
        self._inv_freq = {}

    @property
    def device(self):
        return self.model.embed_tokens.weight.device

    def _rope(self, position_ids):
        """cos/sin per attention layer type for the flattened tokens, fp32, shape [N, 1, D]."""
        out, pos = {}, position_ids.flatten().float()
        for lt, p in self.config.rope.items():
            key = (lt, pos.device)
            if key not in self._inv_freq:
                self._inv_freq[key] = rope_inv_freq(p, self.config.head_dim, self.config.model_type).to(pos.device)
            f = pos[:, None] * self._inv_freq[key][None, :]
            emb = torch.cat((f, f), dim=-1)[:, None, :]
            out[lt] = (emb.cos(), emb.sin())
        return out

    def forward(self, input_ids, position_ids=None, cache=None, return_hidden=False):
        """input_ids [B, T] -> logits [B, T, V] (or final hidden states [B, T, H] with return_hidden).
        Without a cache, sequences may be packed in a row: a new one starts wherever position_ids do not
        continue by +1 (e.g. restart at 0); one that starts at p > 0 is a branch sharing the first p
        tokens of the row's last sequence that started at 0 (Segments). With a cache, row b continues at
        cache.lengths[b]."""
        B, T = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
            if cache is not None:
                position_ids = position_ids + cache.lengths[:, None].to(input_ids.device)
        if position_ids.shape != (B, T):
            raise ValueError(f"position_ids shape {tuple(position_ids.shape)} != input_ids shape {(B, T)}")
        seg = find_segments(position_ids) if cache is None else Segments([T] * B, None, True)
        rope = self._rope(position_ids)
        x = self.model.embed_tokens(input_ids).flatten(0, 1)
        for i, layer in enumerate(self.model.layers):
            if self.gradient_checkpointing and self.training and cache is None:
                x = checkpoint(layer, x, rope, seg, B, use_reentrant=False)
            else:
                x = layer(x, rope, seg, B, cache, i)
        if cache is not None:
            cache.lengths += T
        x = getattr(self.model, self.model.norm_name)(x).view(B, T, -1)
        return x if return_hidden else self.lm_head(x)

    def new_cache(self, batch_size: int, capacity: int = 256) -> "Cache":
        return Cache(self, batch_size, capacity)

    @torch.no_grad()
    def generate(self, prompt_ids, max_new_tokens=64, temperature=1.0, top_p=1.0, seed=None, eos_ids=(), n=None):
        """Sample a continuation of one prompt (list of ids); returns (new ids, their logprobs under the
        distribution actually sampled). temperature 0 = greedy. With `n`, samples n continuations in one
        batch (rows share the prompt) and returns a list of n such pairs."""
        gen = torch.Generator(device="cpu")
        gen.manual_seed(seed if seed is not None else random.getrandbits(63))
        rows = n or 1
        cache = self.new_cache(rows, len(prompt_ids) + max_new_tokens)
        logits = self(torch.tensor([prompt_ids] * rows, device=self.device), cache=cache)[:, -1]
        outs, eos = [([], []) for _ in range(rows)], set(eos_ids)
        done = [False] * rows
        for _ in range(max_new_tokens):
            toks = []
            for r in range(rows):
                tok, lp = sample(logits[r], temperature, top_p, gen)
                toks.append(tok)
                if not done[r]:
                    outs[r][0].append(tok)
                    outs[r][1].append(lp)
                    done[r] = tok in eos
            if all(done):
                break
            logits = self(torch.tensor([[t] for t in toks], device=self.device), cache=cache)[:, -1]
        return outs if n else outs[0]


def sample(logits, temperature, top_p, gen, top_k=0):
    """One token from 1-D logits with temperature / top-k / nucleus sampling; returns (token, logprob under
    the distribution actually sampled from - vLLM's processed logprobs). temperature 0 = greedy."""
    logits = logits.float().cpu()
    if temperature <= 0:
        lp = torch.log_softmax(logits, -1)
        tok = int(lp.argmax())
        return tok, float(lp[tok])
    lp = torch.log_softmax(logits / temperature, -1)
    if 0 < top_k < lp.shape[0]:
        lp = torch.log_softmax(lp.masked_fill(lp < lp.topk(top_k).values[-1], float("-inf")), -1)
    if top_p < 1.0:
        p_sorted, idx = lp.exp().sort(descending=True)
        drop = (p_sorted.cumsum(-1) - p_sorted) >= top_p     # keep the smallest prefix reaching top_p
        lp = torch.log_softmax(lp.index_fill(0, idx[drop], float("-inf")), -1)
    tok = int(torch.multinomial(lp.exp(), 1, generator=gen))
    return tok, float(lp[tok])


# ----------------------------------------------------------------------------- decoding cache

class Cache:
    """Per-row decoding state: K/V per attention layer [B, hkv, capacity, D] (grown on demand; sliding
    layers keep everything and mask by window), conv state per conv layer = last L-1 values of B*x."""

    def __init__(self, model: CausalLM, batch_size: int, capacity: int = 256):
        cfg, p = model.config, model.lm_head.weight
        self.B, self.cap = batch_size, max(1, capacity)
        self.lengths = torch.zeros(batch_size, dtype=torch.long)
        self.kv, self.state = {}, {}
        for i, lt in enumerate(cfg.layer_types):
            if lt == "conv":
                self.state[i] = p.new_zeros(batch_size, cfg.conv_L_cache - 1, cfg.hidden_size)
            else:
                shape = (batch_size, cfg.num_key_value_heads, self.cap, cfg.head_dim)
                self.kv[i] = (p.new_zeros(shape), p.new_zeros(shape))

    def extend(self, other: "Cache"):
        """Append `other`'s rows (e.g. a freshly prefilled request) to this batch."""
        cap = max(self.cap, other.cap)
        fit = lambda c: torch.cat([c, c.new_zeros(*c.shape[:2], cap - c.shape[2], c.shape[3])], 2) \
            if c.shape[2] < cap else c   # noqa: E731
        for i in self.kv:
            self.kv[i] = tuple(torch.cat([fit(a), fit(b)], 0) for a, b in zip(self.kv[i], other.kv[i]))
        for i in self.state:
            self.state[i] = torch.cat([self.state[i], other.state[i]], 0)
        self.lengths = torch.cat([self.lengths, other.lengths])
        self.B, self.cap = self.B + other.B, cap

    def select(self, rows):
        """Keep only these rows, in this order (finished requests leave the batch)."""
        idx = torch.tensor(rows, dtype=torch.long)
        for i in self.kv:
            self.kv[i] = tuple(t.index_select(0, idx.to(t.device)) for t in self.kv[i])
        for i in self.state:
            self.state[i] = self.state[i].index_select(0, idx.to(self.state[i].device))
        self.lengths = self.lengths.index_select(0, idx)
        self.B = len(rows)

    def attend(self, layer, q, k, v, window, seg, B):
        N, h, D = q.shape
        T = N // B
        need = int(self.lengths.max()) + T
        kc, vc = self.kv[layer]
        if need > kc.shape[2]:
            cap = max(need, 2 * kc.shape[2])
            grow = lambda c: torch.cat([c, c.new_zeros(*c.shape[:2], cap - c.shape[2], c.shape[3])], 2)
            kc, vc = grow(kc), grow(vc)
            self.kv[layer] = (kc, vc)
            self.cap = max(self.cap, cap)
        kb, vb = k.view(B, T, -1, D).transpose(1, 2), v.view(B, T, -1, D).transpose(1, 2)
        for b in range(B):        # rows may sit at different lengths (continuous batching)
            s = int(self.lengths[b])
            kc[b, :, s:s + T], vc[b, :, s:s + T] = kb[b], vb[b]
        qb = q.view(B, T, h, D).transpose(1, 2)
        if int(self.lengths.max()) == 0:     # fresh prefill: no cached past, the packed path is exact
            o = _causal(qb, kb, vb, window)
        else:
            qpos = (self.lengths.to(q.device)[:, None] + torch.arange(T, device=q.device))[:, None, :, None]
            kpos = torch.arange(need, device=q.device)[None, None, None, :]
            mask = kpos <= qpos
            if window is not None:
                mask = mask & (kpos > qpos - window)
            o = F.scaled_dot_product_attention(qb, kc[:, :, :need], vc[:, :, :need], attn_mask=mask,
                                               enable_gqa=h != kc.shape[1])
        return o.transpose(1, 2).reshape(N, h, D)

    def conv(self, layer, bx, weight, bias, B):
        N, H = bx.shape
        x = torch.cat([self.state[layer], bx.view(B, N // B, H)], 1)    # [B, L-1+T, H]
        self.state[layer] = x[:, x.shape[1] - (weight.shape[-1] - 1):].detach()
        y = F.conv1d(x.transpose(1, 2), weight, bias, groups=H)            # [B, H, T]
        return y.transpose(1, 2).reshape(N, H)


# ----------------------------------------------------------------------------- loading

def read_config(path: Path) -> Config:
    f = Path(path) / "config.json"
    if not f.is_file():
        raise CheckpointError(f"{path}: no config.json (expected a Hugging Face checkpoint directory)")
    try:
        d = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{f}: invalid JSON: {e}") from None
    if not isinstance(d, dict):
        raise CheckpointError(f"{f}: expected a JSON object")
    if "text_config" in d and "model_type" in d.get("text_config", {}):   # a VL wrapper: take its language model
        d = d["text_config"]
    return Config.from_dict(d, str(f))


def _weight_files(path: Path) -> list:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, AttributeError) as e:
            raise CheckpointError(f"{index}: unreadable weight_map: {e}") from None
        missing = [f for f in files if not (path / f).is_file()]
        if missing:
            raise CheckpointError(f"{index}: shard(s) missing from {path}: {', '.join(missing)}")
        return [path / f for f in files]
    if (path / "model.safetensors").is_file():
        return [path / "model.safetensors"]
    raise CheckpointError(f"{path}: no model.safetensors or model.safetensors.index.json "
                          "(only safetensors checkpoints are supported)")


def _rename(key: str, cfg: Config) -> str:
    if key.startswith("model.language_model."):
        key = "model." + key[len("model.language_model."):]
    if cfg.model_type == "lfm3":
        key = key.replace(".self_attn.gate_proj.", ".self_attn.g_proj.")
    return key


def load_model(path, dtype=None, device=None) -> CausalLM:
    """Load a checkpoint directory (or a name resolve_model knows). dtype defaults to bf16 on CUDA, fp32
    elsewhere. Weights go straight from safetensors into the modules (built on the meta device)."""
    from safetensors import safe_open

    name, path = path, resolve_model(path)
    cfg = read_config(path)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    with torch.device("meta"):
        model = CausalLM(cfg)
    expected = {k: v for k, v in model.state_dict(keep_vars=True).items()}
    if cfg.tie_word_embeddings:
        expected.pop("lm_head.weight")
    loaded, experts, unexpected = {}, {}, []
    for f in _weight_files(path):
        try:
            sf = safe_open(str(f), framework="pt", device=str(device))
        except Exception as e:   # safetensors raises its own error types for bad headers
            raise CheckpointError(f"{f}: not a readable safetensors file: {e}") from None
        with sf:
            for raw in sf.keys():
                key = _rename(raw, cfg)
                parts = key.split(".")
                if ".experts." in key and len(parts) > 5 and parts[-3].isdigit():   # experts.{e}.w1.weight
                    stacked = ".".join(parts[:-3] + [parts[-2]])
                    if stacked in expected:
                        experts.setdefault(stacked, {})[int(parts[-3])] = (sf.get_tensor(raw), f)
                        continue
                if key not in expected:
                    if not (key == "lm_head.weight" and cfg.tie_word_embeddings):
                        unexpected.append(f"{raw} ({f.name})")
                    continue
                t = sf.get_tensor(raw)
                if tuple(t.shape) != tuple(expected[key].shape):
                    raise CheckpointError(f"{f}: tensor {raw} has shape {tuple(t.shape)}, config.json implies "
                                          f"{tuple(expected[key].shape)}")
                loaded[key] = t
    for key, per in experts.items():
        E = expected[key].shape[0]
        if sorted(per) != list(range(E)):
            raise CheckpointError(f"{path}: {key}: found experts {sorted(per)}, config.json has num_experts={E}")
        t = torch.stack([per[e][0] for e in range(E)])
        if t.shape != expected[key].shape:
            raise CheckpointError(f"{per[0][1]}: experts of {key} have shape {tuple(t.shape[1:])}, config.json "
                                  f"implies {tuple(expected[key].shape[1:])}")
        loaded[key] = t
    missing = [k for k in expected if k not in loaded]
    if missing or unexpected:
        msg = []
        if missing:
            msg.append(f"missing tensors: {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
        if unexpected:
            msg.append(f"unexpected tensors: {', '.join(unexpected[:8])}{' ...' if len(unexpected) > 8 else ''}")
        raise CheckpointError(f"{path}: checkpoint does not match config.json ({cfg.model_type}): " + "; ".join(msg))
    for k, t in loaded.items():
        keep_fp32 = k.endswith("expert_bias")     # routing bias stays fp32, like the reference
        loaded[k] = t.to(device=device, dtype=torch.float32 if keep_fp32 else dtype)
    model.load_state_dict(loaded, strict=False, assign=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.requires_grad_(False)   # a frozen base; LoRA adds the trainable parameters
    model.name_or_path = MODEL_REPOS.get(str(name), str(name))
    return model.eval()


def hf_state_dict(model: CausalLM, overrides=None) -> dict:
    """The base weights under their on-disk checkpoint names: experts per expert, no tied lm_head, no LoRA."""
    cfg, out = model.config, {}
    for k, v in model.state_dict().items():
        if ".lora_A." in k or ".lora_B." in k or (k == "lm_head.weight" and cfg.tie_word_embeddings):
            continue
        v = (overrides or {}).get(k, v)
        if ".experts.w" in k:
            for e in range(v.shape[0]):
                out[k.replace(".experts.", f".experts.{e}.") + ".weight"] = v[e]
        else:
            out[k] = v
    return out


def resolve_model(name_or_path) -> Path:
    """A checkpoint directory; a `*.gguf` file or a GGUF model name (checkpoint.GGUF_MODELS), converted once
    into the harness-rl cache by checkpoint.py; or a model name / HF repo id found in the Hugging Face cache
    (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub) as written by `hf download`."""
    import checkpoint as ckpt    # (`checkpoint` here is torch's activation checkpointing)

    p = Path(os.path.expanduser(str(name_or_path)))
    if p.is_dir():
        return p
    if p.suffix.lower() == ".gguf":
        return ckpt.gguf_checkpoint(p)
    name = str(name_or_path)
    if name in ckpt.GGUF_MODELS:
        return ckpt.fetch_gguf_model(name)
    repo = MODEL_REPOS.get(name, name if name.count("/") == 1 else None)
    if repo is None:
        raise CheckpointError(f"{name!r} is neither a checkpoint directory, a .gguf file, nor a known model "
                              f"({', '.join([*MODEL_REPOS, *ckpt.GGUF_MODELS])}) or a Hugging Face repo "
                              "id (org/name)")
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")
    root = Path(hub) / ("models--" + repo.replace("/", "--"))
    snaps = root / "snapshots"
    candidates = []
    ref = root / "refs" / "main"
    if ref.is_file() and (snaps / ref.read_text().strip() / "config.json").exists():
        return snaps / ref.read_text().strip()
    if snaps.is_dir():
        candidates = sorted((s for s in snaps.iterdir() if (s / "config.json").exists()),
                            key=lambda s: s.stat().st_mtime, reverse=True)
    if candidates:
        return candidates[0]
    raise CheckpointError(f"model {name!r} ({repo}) is not in the Hugging Face cache at {hub}; download it with:\n"
                          f"  hf download {repo}\n(or pass the path of a checkpoint directory)")
