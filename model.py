"""The models: LFM2, LFM2-MoE, LFM3 and a dense llama/qwen3-style family, in plain PyTorch.

`CausalLM`'s module names mirror the checkpoint's, so a state-dict key is a PEFT/vLLM adapter key too (loading, config
parsing: checkpoint.py; tiny models: tiny.py). Its forward is padding-free: sequences packed into one row (position_ids
restarting at 0) give exactly the logits of separate runs - attention per segment with SDPA (sliding windows in blocks,
never a T x T mask), the short convolution reset by zeros spaced between segments. A segment starting at p > 0 is a
branch sharing its root's first p tokens (`Segments`): 8 rollouts of one prompt compute it once, exactly. With a cache
(`new_cache`, kvcache.py) it decodes incrementally; the decode loop and sampling are engine.py's.

Left out: training-time dropout, RoPE scalings other than default/linear/llama3/proportional, vision towers, tensor
parallelism (FSDP2 wraps the modules from outside), fused kernels beyond flex_attention (`fused_attention`, opt-in)
and grouped GEMMs for experts, branches in the decoding cache (a row: one sequence).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, noop_context_fn

from kvcache import Cache


# ----------------------------------------------------------------------------- config

@dataclass
class Config:
    """The shape of a model, as checkpoint.parse_config reads it from a config.json (defaults filled in,
    family rules applied)."""
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
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def lfm(self):
        return self.model_type.startswith("lfm")


def rope_inv_freq(p: dict, head_dim: int) -> torch.Tensor:
    """Inverse frequencies over head_dim/2 rotation pairs (fp32), as transformers computes them."""
    base, kind = p["rope_theta"], p["rope_type"]
    if kind == "proportional":      # the first fraction of pairs rotates, the rest gets frequency 0
        n = int(p.get("partial_rotary_factor", 1.0) * head_dim // 2)
        inv = 1.0 / base ** (torch.arange(0, 2 * n, 2, dtype=torch.float) / head_dim)
        return torch.cat([inv, torch.zeros(head_dim // 2 - n)]) / p.get("factor", 1.0)
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
    """Where packed sequences start (wherever position_ids do not continue by +1); computed once per forward. One
    starting at 0 (or at a row's first token) stands alone; one starting at p > 0 inside a row is a *branch* of the
    row's last segment that started at 0 (its root): it attends to the root's K/V at positions < p, its conv sees the
    root's inputs at p-(L-1)..p-1, and its logits are those of root[:p] + branch run alone."""
    lengths: list            # segment lengths, in order over the flattened [B*T] token stream
    seg_id: torch.Tensor     # [B*T] segment index of every token
    uniform: bool            # exactly one segment per row (a plain batch): batched fast path
    starts: list = None      # flat offset of each segment's first token
    root: list = None        # per segment: index of the segment it branches from, or None
    shared: list = None      # per segment: how many root tokens it shares (its first position), 0 if none
    branched: bool = False   # any branch at all (else the plain per-segment path)
    pos: torch.Tensor = None  # [B*T] every token's position
    fused: bool = False      # attention as one flex_attention call over the whole batch (`fused_attention`)
    _fill: dict = field(default_factory=dict, repr=False)   # packed_conv's branch padding indices, per (L, device)
    _masks: dict = field(default_factory=dict, repr=False)  # fused_attention's block masks, per window


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
    seg = Segments(lengths, seg_id, uniform=len(lengths) == B, starts=idx, pos=position_ids.flatten())
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
    if seg.fused and not _FLEX_FAILED and q.shape[-1] >= 16:     # (flex's kernel needs heads of 16 or more)
        try:
            return fused_attention(q, k, v, seg, window)
        except torch.OutOfMemoryError:
            raise                 # memory, not the kernel: the plan's business (falling back would need more)
        except Exception as e:    # its forward's compile here (no triton, an old GPU): per-segment SDPA, said once
            _FLEX_FAILED.append(f"{type(e).__name__}: {e}")
            warnings.warn(f"fused attention (flex_attention) failed, training on per-segment SDPA instead: "
                          f"{_FLEX_FAILED[0]}")
    if seg.uniform:   # one sequence per row: a single batched call
        T = q.shape[0] // B
        qb, kb, vb = (t.view(B, T, *t.shape[1:]).transpose(1, 2) for t in (q, k, v))
        return _causal(qb, kb, vb, window).transpose(1, 2).reshape(q.shape)
    # split once: a slice per segment of the whole [N, ...] tensor would cost a backward pass of N zeros each
    qs_, ks_, vs_ = (t.split(seg.lengths) for t in (q, k, v))
    outs = []
    for i in range(len(seg.lengths)):
        if seg.branched and seg.shared[i]:
            p, r = seg.shared[i], seg.root[i]
            lo = 0 if window is None else max(0, p - window + 1)     # root keys the first query can still see
            qs = qs_[i].transpose(0, 1).unsqueeze(0)
            ks, vs = (torch.cat([t[r][lo:p], t[i]]).transpose(0, 1).unsqueeze(0) for t in (ks_, vs_))
            outs.append(_prefixed(qs, ks, vs, p - lo, window)[0].transpose(0, 1))
        else:
            qs, ks, vs = (t[i].transpose(0, 1).unsqueeze(0) for t in (qs_, ks_, vs_))
            outs.append(_causal(qs, ks, vs, window)[0].transpose(0, 1))
    return torch.cat(outs, 0)


_flex = {}     # flex_attention by "on a GPU": compiled there on first use (eager elsewhere: a dense reference)
_FLEX_FAILED = []     # why it failed in this process, once it did (a backward's failure is not caught: it raises)


def fused_attention(q, k, v, seg: Segments, window):
    """segment_attention as one flex_attention call: the packed batch is one sequence of N tokens under a block mask -
    a key is seen if it is in the query's segment and not after it, or it is one of the first `shared` positions of
    the query's root (a branch), and, on sliding layers, within `window` positions. Only the blocks the mask leaves
    are computed (fused, O(N) memory), where the default path runs SDPA per segment with boolean masks for branches
    and windows."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    gpu = q.is_cuda
    if gpu not in _flex:
        _flex[gpu] = torch.compile(flex_attention, dynamic=True) if gpu else flex_attention
    N, h, D = q.shape
    if window not in seg._masks:
        sid, pos = seg.seg_id.to(q.device), seg.pos.to(q.device)
        n = len(seg.lengths)
        root = torch.tensor([r if r is not None else -1 for r in seg.root] if seg.branched else [-1] * n,
                            device=q.device)
        shared = torch.tensor(seg.shared if seg.branched else [0] * n, device=q.device)

        def seen(b, head, qi, ki):
            sq, sk = sid[qi], sid[ki]
            ok = ((sq == sk) & (ki <= qi)) | ((sk == root[sq]) & (pos[ki] < shared[sq]))
            return ok if window is None else ok & (pos[qi] - pos[ki] < window)
        seg._masks[window] = create_block_mask(seen, None, None, N, N, device=q.device, _compile=gpu)
    o = _flex[gpu](*(t.transpose(0, 1)[None] for t in (q, k, v)), block_mask=seg._masks[window],
                   enable_gqa=h != k.shape[1])
    return o[0].transpose(0, 1)


MASK_ELEMENTS = 1 << 24    # a branch's [queries, keys] mask is built in query blocks of at most this many
WINDOW_BLOCK = 256         # sliding layers: queries per block (each sees its block and the window before it)


def _prefixed(q, k, v, p, window):
    """q [1,h,n,D] are the keys' last n positions (k/v [1,hkv,p+n,D]: p keys before them, then their own):
    each query sees every key up to itself, within `window` when given. Masks are [block, keys]: the whole
    [n, p+n] at once when it is small, else query blocks (of `window` for sliding layers)."""
    n, K = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    blk = max(window, WINDOW_BLOCK) if window is not None else max(1, MASK_ELEMENTS // K)
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
    if window is None or q.shape[2] <= window:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
    return _prefixed(q, k, v, 0, window)     # sliding: query blocks of `window`, each sees < 2*window keys


class Attention(nn.Module):
    def __init__(self, cfg: Config, layer_type: str):
        super().__init__()
        H, h, hkv, D = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        b = cfg.attention_bias
        self.h, self.hkv, self.D = h, hkv, D
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
        counts = torch.bincount(flat, minlength=ex.w1.shape[0])
        tok = order // self.k
        w = weights.flatten()[order]
        if _grouped(x):     # every expert's tokens in one grouped GEMM each: no sync with the host
            offs = counts.cumsum(0).to(torch.int32)
            h = x[tok]
            g = lambda a, m: torch._grouped_mm(a, m.transpose(1, 2), offs=offs)   # noqa: E731
            y = g(F.silu(g(h, ex.w1)) * g(h, ex.w3), ex.w2)
            return out.index_add_(0, tok, (y * w[:, None]).to(out.dtype))
        s = 0
        for e, n in enumerate(counts.tolist()):   # a loop over experts (not tokens): one matmul each
            if n:
                t = tok[s:s + n]
                h = x[t]
                y = F.linear(F.silu(F.linear(h, ex.w1[e])) * F.linear(h, ex.w3[e]), ex.w2[e])
                out.index_add_(0, t, (y * w[s:s + n, None]).to(out.dtype))
            s += n
        return out


_GROUPED = {}     # (device type, dtype) -> torch._grouped_mm works there


def _grouped(x):
    """Whether torch._grouped_mm (a private op: CPU, and CUDA sm90+ in bf16) runs for x's device and dtype - tried
    once on a 2-expert product against plain matmuls; else MoE falls back to its loop over experts."""
    key = (x.device.type, x.dtype)
    if key not in _GROUPED:
        try:
            a, m = torch.ones(32, 16, device=x.device, dtype=x.dtype), torch.ones(2, 16, 16, device=x.device,
                                                                                   dtype=x.dtype)
            got = torch._grouped_mm(a, m, offs=torch.tensor([16, 32], device=x.device, dtype=torch.int32))
            _GROUPED[key] = bool(torch.equal(got, a @ m[0]))
        except (AttributeError, RuntimeError, NotImplementedError, TypeError):
            _GROUPED[key] = False
    return _GROUPED[key]


class Block(nn.Module):
    def __init__(self, cfg: Config, i: int):
        super().__init__()
        self.layer_type = lt = cfg.layer_types[i]
        if lt == "conv":
            self.conv = ShortConv(cfg)
        else:
            self.self_attn = Attention(cfg, lt)
        # checkpoint names: LFM operator_norm / ffn_norm / feed_forward; dense input_layernorm / ... / mlp
        self.ffn_name = "feed_forward" if cfg.lfm else "mlp"
        self.norm_names = ("operator_norm", "ffn_norm") if cfg.lfm else ("input_layernorm", "post_attention_layernorm")
        moe = cfg.model_type == "lfm2_moe" and i >= cfg.num_dense_layers
        setattr(self, self.ffn_name, MoE(cfg) if moe else MLP(cfg, cfg.intermediate_size))
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
        # training attention as one flex_attention call (`fused_attention`): opt-in, as on an H200 (torch 2.11) its
        # compilation took minutes (bench/gpu.sh, docs/gpu.md); None: on a GPU
        self.fused = False
        self.model = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.gradient_checkpointing = False   # per-layer activation checkpointing while training
        # checkpoint's context_fn: thread-local state the recomputation needs (on a GPU it runs in autograd's own
        # thread, not the forward's): lora.add_lora sets one that routes it to the forward's adapter
        self.recompute_context = noop_context_fn
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
                self._inv_freq[key] = rope_inv_freq(p, self.config.head_dim).to(pos.device)
            f = pos[:, None] * self._inv_freq[key][None, :]
            emb = torch.cat((f, f), dim=-1)[:, None, :]
            out[lt] = (emb.cos(), emb.sin())
        return out

    def forward(self, input_ids, position_ids=None, cache=None, return_hidden=False):
        """input_ids [B, T] -> logits [B, T, V] (final hidden states [B, T, H] with return_hidden). Without a cache,
        sequences may be packed in a row (see Segments); with one, row b continues at cache.lengths[b]."""
        B, T = input_ids.shape
        if cache is not None:
            start = cache.start(T, input_ids.device)
            position_ids = start if position_ids is None else position_ids
        elif position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        if position_ids.shape != (B, T):
            raise ValueError(f"position_ids shape {tuple(position_ids.shape)} != input_ids shape {(B, T)}")
        seg = find_segments(position_ids) if cache is None else Segments([T] * B, None, True)
        seg.fused = cache is None and (self.fused if self.fused is not None else input_ids.is_cuda)
        rope = self._rope(position_ids)
        x = self.model.embed_tokens(input_ids).flatten(0, 1)
        for i, layer in enumerate(self.model.layers):
            if self.gradient_checkpointing and self.training and cache is None:
                x = checkpoint(layer, x, rope, seg, B, use_reentrant=False, context_fn=self.recompute_context)
            else:
                x = layer(x, rope, seg, B, cache, i)
        if cache is not None:
            cache.lengths += T
        x = getattr(self.model, self.model.norm_name)(x).view(B, T, -1)
        return x if return_hidden else self.lm_head(x)

    def new_cache(self, batch_size: int, capacity: int = 256, budget=None) -> "Cache":
        return Cache(self, batch_size, capacity, _causal, budget)    # kvcache.py: slots, so rows join/leave cheaply
