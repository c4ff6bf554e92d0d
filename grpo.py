"""GRPO, the algorithm: rewards, group advantages, turns -> token sequences, staleness, packing, the loss.

Plain functions and dataclasses, no model or server code (train.py wires them up). In order:

- `shaped_reward`: verifier score + bonus * (1 - tool_calls / scale), the bonus only on a full pass;
  a guard note makes it 0; an ungraded rollout (verifier failed to run) stays None.
- `ESTIMATORS` (`@estimator(name)`, --advantage): advantage estimators, each a function of all of a step's
  collected groups' rewards. "group" (default): `group_advantages`, (r - mean) / (std + eps) over a group's
  graded rollouts (std with ddof=1, as TRL); ungraded rollouts get no advantage and stay out of the baseline;
  a group whose rewards are all equal (`varied` false) carries no signal and is skipped.
- `build_sequences`: a rollout's turns, exactly as the server returned them (prompt ids, completion ids,
  sampling logprobs), become training sequences without ever re-tokenizing. A turn whose prompt extends
  an existing sequence token for token is appended to it (the new prompt tokens - tool output, next
  user text - get loss mask 0); otherwise (the harness re-rendered or compacted the history) it starts
  a new sequence. Every sequence carries the rollout's one advantage.
- `drop_stale`: rollouts begun more than `max_staleness` adapter versions ago are dropped.
- `pack`: padding-free micro-batches (one packed row each) under the step's token budget, FIFO. A
  sequence that shares a long enough prefix of untrained tokens with an earlier one (a GRPO group's
  common prompt) is placed as a branch of it: the prefix is computed once (model.Segments), exactly.
- `token_logprobs`: log p(target) from final hidden states, chunked over tokens, its gradient computed
  in the same pass, so no [tokens x vocab] fp32 tensor ever exists whole and nothing is recomputed.
- `grpo_loss`: an objective of `LOSSES` (`@objective(name, knobs)`, --loss), token-mean over the whole step (divided by the step's trained
  token count, so gradient accumulation over micro-batches is exact), optional k3 KL to the base:
  "tis" (default) - truncated importance sampling for stale rollouts: with one optimizer step per batch
  the proximal policy of decoupled PPO (AReaL) is the current weights, so the per-token loss is
  -min(pi/mu, C) * A * pi/sg(pi): every token keeps its gradient, the weight corrects for the
  rollout having been sampled by an older adapter (mu) and is truncated at C (verl / slime / SkyRL);
  "clip" - PPO's clipped ratio against the behaviour logprobs (tokens outside the trust region get
  no gradient). Stats: importance weights, truncated and clipped fractions, and `mismatch`, the mean
  |log pi - log mu| over tokens the trained version itself sampled (trainer/server agreement).

The recipe's numbers (bonus, staleness, micro-batches, loss settings) come in as arguments from recipe.py's
table; the defaults left are numerics (eps, chunk sizes, MIN_SHARED) and the identity (temperature 1).

Left out: reward models, per-sequence (instead of per-token) normalisation, value functions, std-free
advantages, and any distributed logic; prefix sharing deeper than one level (a branch of a
branch: a rollout's later turns re-rendered into a new sequence share only its root's prefix) and over
trained tokens (their loss terms differ per sequence).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch.utils.checkpoint import checkpoint


# ----------------------------------------------------------------------------- rewards, advantages

def shaped_reward(score, tool_calls, blocked, bonus, scale):
    """The recipe's reward (bonus, scale: recipe.py's table). score in [0, 1] or None (ungraded); blocked =
    the guard blocked a call."""
    if score is None:
        return None
    if blocked:
        return 0.0
    score = float(score)
    return score + bonus * (1 - tool_calls / scale) if score == 1.0 else score


def group_advantages(rewards, eps=1e-6):
    """Advantages for one group (None in -> None out). Returns (advantages, has_signal): has_signal is
    False when fewer than two rollouts are graded or all graded rewards are equal."""
    graded = [r for r in rewards if r is not None]
    if len(graded) < 2:
        return [None] * len(rewards), False
    if not varied(rewards):
        return [None if r is None else 0.0 for r in rewards], False
    mean = sum(graded) / len(graded)
    std = math.sqrt(sum((r - mean) ** 2 for r in graded) / (len(graded) - 1))
    return [None if r is None else (r - mean) / (std + eps) for r in rewards], True


def varied(rewards):
    """Whether a group's graded rewards differ (two or more graded, not all equal): what any baseline needs to
    give the group a gradient. The step collects groups by it, before any estimator runs."""
    graded = [r for r in rewards if r is not None]
    return len(graded) >= 2 and max(graded) - min(graded) >= 1e-9


# Advantage estimators, by name (--advantage): the step's collected groups' rewards (a list per group, None =
# ungraded) -> an advantage per rollout, None where the rollout trains on nothing (ungraded, or a group without
# signal). A pure function of the whole batch, run once collection is done: a batch-level baseline fits here too.
ESTIMATORS = {}


def estimator(name):
    def register(fn):
        ESTIMATORS[name] = fn
        return fn
    return register


@estimator("group")
def group_normalized(groups):
    """GRPO's: (r - mean) / std within each group (group_advantages); a group without signal trains on nothing."""
    out = []
    for rewards in groups:
        adv, signal = group_advantages(rewards)
        out.append(adv if signal else [None] * len(rewards))
    return out


# ----------------------------------------------------------------------------- turns -> sequences

@dataclass
class Sequence:
    """One training row: tokens, which of them are trained (mask), their behaviour logprobs."""
    tokens: list
    mask: list              # 1 = generated by the policy (trained), 0 = prompt / tool output / user text
    old_logp: list          # behaviour logprob where mask is 1, else 0.0
    advantage: float
    start_version: int = 0  # the adapter version its rollout began with (staleness counts from it)
    rollout: str = ""
    turns: int = 0
    versions: list = field(default_factory=list)   # per token: the adapter version that sampled it

    def __len__(self):
        return len(self.tokens)


def build_sequences(turns, advantage, rollout="", start_version=None) -> list:
    """Merge a rollout's turns (rollout.Turn: prompt_ids, completion_ids, logprobs, version) into as few
    sequences as the token ids allow (see the module docstring). start_version: the adapter version the
    rollout began with (staleness counts from it; default: its first turn's)."""
    seqs = []
    start = start_version if start_version is not None else turns[0].version if turns else 0
    for t in turns:
        if len(t.logprobs) != len(t.completion_ids):
            raise ValueError(f"rollout {rollout}: turn has {len(t.completion_ids)} completion ids but "
                             f"{len(t.logprobs)} logprobs")
        target = None
        for s in reversed(seqs):          # the most recent sequence first; then older ones (sub-agent forks)
            n = len(s.tokens)
            if len(t.prompt_ids) >= n and t.prompt_ids[:n] == s.tokens:
                target = s
                break
        if target is None:
            n = len(t.prompt_ids)
            seqs.append(Sequence(list(t.prompt_ids), [0] * n, [0.0] * n, advantage, start, rollout,
                                 versions=[t.version] * n))
            target = seqs[-1]
        else:
            ext = t.prompt_ids[len(target.tokens):]
            target.tokens += ext
            target.mask += [0] * len(ext)
            target.old_logp += [0.0] * len(ext)
            target.versions += [t.version] * len(ext)
        target.tokens += t.completion_ids
        target.mask += [1] * len(t.completion_ids)
        target.old_logp += [float(x) for x in t.logprobs]
        target.versions += [t.version] * len(t.completion_ids)
        target.turns += 1
    return [s for s in seqs if any(s.mask)]


def is_stale(version, current_version, max_staleness):
    """The staleness window, in one place: a rollout (or an adapter version) that began at `version` is
    outside it when more than `max_staleness` versions behind. Used to drop rollouts (drop_stale), to
    unload served versions (train.Trainer.publish) and to size the server's adapter slots (live_versions)."""
    return current_version - version > max_staleness


def live_versions(max_staleness):
    """The most adapter versions of one trainer the server holds at once by that rule: the current one,
    the max_staleness before it, and the next one, loaded before the oldest is unloaded (vLLM --max-loras)."""
    return max_staleness + 2


def drop_stale(items, current_version, max_staleness):
    """Keep items (anything with .start_version) at most `max_staleness` versions
    behind `current_version`. Returns (kept, dropped)."""
    kept = [x for x in items if not is_stale(x.start_version, current_version, max_staleness)]
    dropped = [x for x in items if is_stale(x.start_version, current_version, max_staleness)]
    return kept, dropped


# ----------------------------------------------------------------------------- packing

@dataclass
class MicroBatch:
    """One packed row: input tokens, positions (see model.Segments), next-token targets, loss weights.
    A sequence that shares a prefix with an earlier one in the row (its root) holds only its own tokens,
    at positions p.., where p = `shared` tokens come from the root."""
    input_ids: torch.Tensor      # [1, T]
    position_ids: torch.Tensor   # [1, T]
    targets: torch.Tensor        # [1, T] token to predict at each position
    mask: torch.Tensor           # [1, T] float, 1 where the target was generated by the policy
    old_logp: torch.Tensor       # [1, T] behaviour logprob of the target
    advantages: torch.Tensor     # [1, T] the target's sequence advantage
    versions: torch.Tensor       # [1, T] adapter version that sampled the target (mismatch, staleness stats)
    sequences: list = field(default_factory=list, repr=False)   # the original sequences, in row order
    shared: list = field(default_factory=list, repr=False)      # per sequence: input tokens taken from its root

    @property
    def num_tokens(self):
        return self.input_ids.shape[1]


@dataclass
class Packed:
    micro_batches: list
    waiting: list               # sequences that did not fit this step, oldest first (put back in the queue)
    tokens: int = 0             # tokens computed this step (the budget's numerator; shared prefixes once)
    loss_tokens: int = 0        # masked (trained) tokens this step: the loss's denominator
    truncated: int = 0          # sequences cut to the micro-batch length
    truncated_tokens: int = 0
    dropped: int = 0            # sequences with no trained token left after truncation
    fill: float = 0.0           # tokens / budget
    shared_tokens: int = 0      # tokens not computed because a sequence shared its root's prefix


# Shortest prefix worth sharing: below it a coincidence (a chat template's first tokens) would split rows
# into more segments for almost no saving. A GRPO group shares its whole prompt (hundreds to thousands).
MIN_SHARED = 32


def pack(sequences, token_budget, micro_batches, min_shared=MIN_SHARED) -> Packed:
    """Pack sequences (FIFO order: oldest first) into at most `micro_batches` padding-free rows whose
    tokens sum to at most `token_budget`; no row is longer than token_budget // micro_batches (one row's
    activations are what must fit in memory).

    - Shared prefixes (tree packing): a sequence whose first p >= `min_shared` input positions equal an
      earlier placed sequence's (its root) - the same input tokens, the same targets, and every one of
      those targets untrained (mask 0) in both - joins the root's row as a branch: only its remaining
      tokens are placed, at positions p.., and the model attends to the root's first p tokens for it
      (model.Segments). Exact for the loss: the shared positions carry no loss in either sequence, so
      their advantage / old_logp / version never matter, and the model's outputs are those of the whole
      sequence. A GRPO group's 8 rollouts share their prompt this way. It costs its own tokens only,
      against the row length and the budget; when its root's row is full it is placed as a root of its
      own (a tree longer than a row is split). One level: a branch shares a prefix of its root, not of
      another branch. `min_shared=None` turns sharing off.
    - FIFO: sequences are taken in order; one that does not fit is skipped for this step and returned
      first in `waiting`, so it leads the next step (later, smaller ones may fill the gap meanwhile).
    - Fill: placement is best fit (the fullest row that still has room), so later, shorter sequences
      fill the gaps; steady-state fill on a realistic length mix is measured by bench/grpo.py.
    - Balance: the chosen trees (a root and its branches) are then laid out longest first into the
      shortest row (LPT) when that fits, which keeps the slowest micro-batch close to the mean.
    - Too long: a sequence longer than a row is truncated to the row length (its tail is not trained),
      and counted; dropping it instead would bias training against long sessions. A sequence left with
      no trained token is dropped and counted.
    """
    cap = token_budget // micro_batches
    out = Packed([], [])
    ready = []
    for s in sequences:
        n = len(s) - 1                    # inputs are tokens[:-1], targets tokens[1:]
        if n > cap:
            out.truncated += 1
            out.truncated_tokens += n - cap
            s = Sequence(s.tokens[:cap + 1], s.mask[:cap + 1], s.old_logp[:cap + 1], s.advantage, s.start_version,
                         s.rollout, s.turns, s.versions[:cap + 1])
            if not any(s.mask[1:]):
                out.dropped += 1
                continue
            n = cap
        if n < 1 or not any(s.mask[1:]):
            out.dropped += 1
            continue
        ready.append((n, s))
    # FIFO placement, best fit: each sequence, oldest first, joins the placed root it shares the longest
    # prefix with when the root's row has room for its own tokens, else goes into the fullest row it fits
    # (under the row length and the step budget) as a new root; one that fits nowhere waits.
    loads, total, placed = [0] * micro_batches, 0, [[] for _ in range(micro_batches)]
    trees = []                            # [row, cost, [(n, s, shared)]]; the first entry is the root
    for n, s in ready:
        best = None
        if min_shared is not None:
            first = s.mask.index(1, 1)    # its first trained target is tokens[first]: input first-1
            for t in trees:
                p = _shared(t[2][0][1], s, first, min_shared)
                fits = loads[t[0]] + n - p <= cap and total + n - p <= token_budget
                if p and fits and (best is None or p > best[1]):
                    best = (t, p)
        if best is not None:
            t, p = best
            t[2].append((n, s, p))
            t[1] += n - p
            loads[t[0]] += n - p
            total += n - p
            continue
        fits = [r for r in range(micro_batches) if loads[r] + n <= cap]
        if fits and total + n <= token_budget:
            r = max(fits, key=lambda r: loads[r])
            loads[r] += n
            total += n
            placed[r].append(len(trees))
            trees.append([r, n, [(n, s, 0)]])
        else:
            out.waiting.append(s)
    rows = _balance([t[1] for t in trees], micro_batches, cap) or placed
    if out.waiting:                       # keep the queue's order among waiting sequences
        pos = {id(s): k for k, (_, s) in enumerate(ready)}
        out.waiting.sort(key=lambda s: pos.get(id(s), -1))
    for idx in rows:
        if idx:
            out.micro_batches.append(_row([trees[i][2] for i in sorted(idx)]))
    out.tokens = sum(mb.num_tokens for mb in out.micro_batches)
    out.shared_tokens = sum(sum(mb.shared) for mb in out.micro_batches)
    out.loss_tokens = int(sum(mb.mask.sum().item() for mb in out.micro_batches))
    out.fill = out.tokens / token_budget
    return out


def _shared(root, s, first, min_shared):
    """Input positions `s` may take from `root`: the longest p with the same tokens[:p + 1] (so the same
    inputs and targets) and no trained target among them in either; 0 when below `min_shared`."""
    limit = min(first, root.mask.index(1, 1)) - 1          # targets 1..limit are untrained in both
    if limit < min_shared or root.tokens[:min_shared + 1] != s.tokens[:min_shared + 1]:
        return 0
    lo, hi = min_shared + 1, limit + 1                     # tokens[:lo] agree; find the longest agreeing prefix
    if root.tokens[:hi] == s.tokens[:hi]:
        return limit
    while hi - lo > 1:                                     # invariant: [:lo] agree, [:hi] differ
        mid = (lo + hi) // 2
        if root.tokens[lo:mid] == s.tokens[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo - 1


def _balance(lengths, k, cap):
    """Rows for the chosen trees: LPT (longest first into the shortest row) when that fits them all
    under `cap` - it keeps the slowest micro-batch short - else None (keep the placement as it is)."""
    rows, loads = [[] for _ in range(k)], [0] * k
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        r = min(range(k), key=lambda r: loads[r])
        if loads[r] + lengths[i] > cap:
            return None
        rows[r].append(i)
        loads[r] += lengths[i]
    return rows


def _row(trees) -> MicroBatch:
    """One row from trees [(n, sequence, shared)], each root first: a root at positions 0..n-1, then its
    branches longest shared first (so no branch's first position continues the previous segment's)."""
    ids, pos, tgt, mask, old, adv, ver, seqs, shared = [], [], [], [], [], [], [], [], []
    for tree in trees:
        root, branches = tree[0], sorted(tree[1:], key=lambda b: -b[2])
        for n, s, p in [root, *branches]:
            ids += s.tokens[p:-1]
            pos += range(p, n)
            tgt += s.tokens[p + 1:]
            mask += s.mask[p + 1:]
            old += s.old_logp[p + 1:]
            adv += [s.advantage] * (n - p)
            ver += s.versions[p + 1:] if len(s.versions) == len(s) else [s.start_version] * (n - p)
            seqs.append(s)
            shared.append(p)
    t = lambda x, dt: torch.tensor([x], dtype=dt)  # noqa: E731
    return MicroBatch(t(ids, torch.long), t(pos, torch.long), t(tgt, torch.long), t(mask, torch.float32),
                      t(old, torch.float32), t(adv, torch.float32), t(ver, torch.long), seqs, shared)


# ----------------------------------------------------------------------------- log-probabilities, loss

class _TokenLogprobs(torch.autograd.Function):
    """log p(target) per token, chunked. The gradient w.r.t. the hidden state is computed in the same
    pass (d logp / d h = w_target - softmax(h W^T) W), so backward is a multiply and nothing is recomputed:
    2 matmuls per chunk, like the naive path, and never a whole [tokens x vocab] tensor."""

    @staticmethod
    def forward(ctx, h, weight, targets, chunk):
        logp = torch.empty(h.shape[0], dtype=torch.float32, device=h.device)
        need_grad = ctx.needs_input_grad[0]
        dh = torch.empty_like(h) if need_grad else None
        for s in range(0, h.shape[0], chunk):
            hs, ts = h[s:s + chunk], targets[s:s + chunk]
            logits = (hs @ weight.t()).float()
            lse = torch.logsumexp(logits, -1)
            logp[s:s + chunk] = logits.gather(-1, ts[:, None])[:, 0] - lse
            if need_grad:
                p = torch.exp(logits.sub_(lse[:, None])).to(weight.dtype)      # softmax, in place
                dh[s:s + chunk] = (weight[ts] - p @ weight).to(h.dtype)
        ctx.save_for_backward(dh)
        return logp

    @staticmethod
    def backward(ctx, grad):
        (dh,) = ctx.saved_tensors
        return grad.to(dh.dtype)[:, None] * dh, None, None, None


def _chunk_logp(h, weight, targets):
    logits = (h @ weight.t()).float()
    return logits.gather(-1, targets[:, None])[:, 0] - torch.logsumexp(logits, -1)


def token_logprobs(hidden, lm_head_weight, targets, chunk=2048, temperature=1.0):
    """log p(targets) (fp32) from final hidden states [.., T, H] and the output embedding [V, H], `chunk`
    tokens at a time: peak extra memory is one [chunk, V] fp32 block plus a [T, H] gradient buffer. The
    output embedding is frozen in LoRA training; if it does require grad, chunks are recomputed in
    backward instead (torch checkpointing). `temperature`: the distribution the server sampled from,
    softmax(logits / T) - the one its logprobs are of, so pi and mu compare like with like (as verl and
    slime do); T <= 0 (greedy) counts as 1. top-p / top-k truncation is not modelled."""
    shape = targets.shape
    h, tg = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1).to(hidden.device)
    if temperature > 0 and temperature != 1.0:
        h = h / temperature                 # (h / T) W^T = logits / T
    if lm_head_weight.requires_grad and torch.is_grad_enabled():
        out = [checkpoint(_chunk_logp, h[s:s + chunk], lm_head_weight, tg[s:s + chunk], use_reentrant=False)
               for s in range(0, h.shape[0], chunk)]
        return torch.cat(out).view(shape)
    return _TokenLogprobs.apply(h, lm_head_weight, tg, chunk).view(shape)


# Policy-gradient objectives, by name (--loss): each takes the trained logprobs (with gradient), the sampling ones,
# the advantages, r = exp(logp - old_logp) without gradient, and its own settings from the table (`knobs`, passed
# by name); it returns the per-token loss and its own per-token stats (each averaged over the trained tokens).
LOSSES = {}


@dataclass
class Objective:
    fn: object
    knobs: tuple            # its settings, by their names in the table (recipe.SHARED)
    help: str


def objective(name, knobs=(), help=""):
    def register(fn):
        LOSSES[name] = Objective(fn, tuple(knobs), help)
        return fn
    return register


@objective("tis", knobs=("tis_cap",), help="truncated importance sampling min(pi/mu, C) for stale rollouts")
def tis_objective(logp, old_logp, advantages, ratio, *, tis_cap):
    """-min(sg(r), tis_cap) * A * exp(logp - sg(logp)): value -w*A, gradient -w * A * grad(logp). The weight w
    corrects for a stale (or server-mismatched) sample and is truncated at `tis_cap`; no token loses its gradient."""
    weight = ratio.clamp(max=tis_cap)
    return -weight * advantages * torch.exp(logp - logp.detach()), {
        "clip_frac": torch.zeros_like(ratio), "trunc_frac": ratio > tis_cap, "is_weight": weight}


@objective("clip", knobs=("eps_low", "eps_high", "ratio_cap"), help="PPO's clipped ratio")
def clip_objective(logp, old_logp, advantages, ratio, *, eps_low, eps_high, ratio_cap):
    """max(-A * r, -A * clip(r, 1 - eps_low, 1 + eps_high)); `ratio_cap` truncates r first (no gradient above it:
    bounds the A < 0 side, like dual-clip)."""
    r = torch.exp(logp - old_logp)
    if ratio_cap is not None:
        r = r.clamp(max=ratio_cap)
    no_grad = ((ratio < 1 - eps_low) & (advantages < 0)) | ((ratio > 1 + eps_high) & (advantages > 0))
    if ratio_cap is not None:
        no_grad |= ratio > ratio_cap
    return torch.maximum(-advantages * r, -advantages * r.clamp(1 - eps_low, 1 + eps_high)), {
        "clip_frac": no_grad, "trunc_frac": ratio > ratio_cap if ratio_cap is not None else torch.zeros_like(no_grad),
        "is_weight": r.detach()}


def grpo_loss(logp, old_logp, advantages, mask, num_tokens=None, *, objective, beta, ref_logp=None, fresh=None,
              **knobs):
    """The policy-gradient loss of one micro-batch, divided by `num_tokens` = the trained tokens of the
    whole step (default: this micro-batch's), so summing backward() over micro-batches is exactly the
    step's token-mean. old_logp = mu, the server's sampling logprobs; r = exp(logp - old_logp).
    objective: a name in LOSSES, given its knobs (other knobs are ignored).
    `beta` adds the k3 estimate of KL(policy || base), `ref_logp` = the base model's logprobs.
    `fresh`: mask of tokens sampled by the very weights being trained (staleness 0); `mismatch` = mean
    |logp - old_logp| over them, which is 0 up to numerics when trainer and server agree.
    Returns (loss, stats); the stats are per-token means over the trained tokens of this micro-batch."""
    if objective not in LOSSES:
        raise ValueError(f"grpo_loss: objective must be one of {', '.join(LOSSES)}, not {objective!r}")
    obj = LOSSES[objective]
    if missing := [k for k in obj.knobs if k not in knobs]:
        raise ValueError(f"grpo_loss: objective {objective!r} needs {', '.join(missing)}")
    mask = mask.to(logp.dtype)
    n = mask.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=logp.dtype)
    n = n.clamp(min=1)
    log_ratio = logp.detach() - old_logp
    ratio = torch.exp(log_ratio)
    per_token, own = obj.fn(logp, old_logp, advantages, ratio, **{k: knobs[k] for k in obj.knobs})
    kl = None
    if beta:
        if ref_logp is None:
            raise ValueError("grpo_loss: beta > 0 needs ref_logp (the base model's logprobs)")
        d = ref_logp - logp
        kl = torch.exp(d) - d - 1
        per_token = per_token + beta * kl
    loss = (per_token * mask).sum() / n
    with torch.no_grad():
        m = mask.bool()
        cnt = m.sum().clamp(min=1)
        f = m & fresh.bool() if fresh is not None else torch.zeros_like(m)
        stats = {k: (v.detach().to(logp.dtype) * mask).sum() / cnt for k, v in own.items()}   # e.g. clip_frac: cut
        stats.update({
            "ratio_mean": (ratio * mask).sum() / cnt,
            "ratio_max": ratio[m].max() if m.any() else ratio.new_ones(()),
            "mismatch": (log_ratio.abs() * f).sum() / f.sum().clamp(min=1),
            "fresh_tokens": f.sum(),
            "entropy": -(logp.detach() * mask).sum() / cnt,  # sampled-token estimate of the entropy
            "kl": (kl.detach() * mask).sum() / cnt if kl is not None else torch.zeros(()),
            "tokens": m.sum(),
        })
    return loss, stats


class StepStats:
    """grpo_loss's per-micro-batch stats -> the step's: token-weighted means (mismatch over fresh tokens), whatever
    stats the objective returned."""
    SPECIAL = ("tokens", "fresh_tokens", "mismatch", "ratio_max")

    def __init__(self):
        self.sums, self.n, self.fresh, self.loss, self.ratio_max = {}, 0, 0, 0.0, 0.0

    def add(self, loss, st):
        n, f = st["tokens"].item(), st["fresh_tokens"].item()
        self.n, self.fresh, self.loss = self.n + n, self.fresh + f, self.loss + loss.item()
        self.ratio_max = max(self.ratio_max, st["ratio_max"].item())
        for k, v in st.items():
            if k not in self.SPECIAL:
                self.sums[k] = self.sums.get(k, 0.0) + n * v.item()
        self.sums["mismatch"] = self.sums.get("mismatch", 0.0) + f * st["mismatch"].item()

    def means(self):
        if not self.n:                # an empty step: nothing was trained
            return dict.fromkeys(("ratio_mean", "entropy", "kl", "mismatch", "loss", "ratio_max")) | {"fresh_tokens": 0}
        out = {k: v / self.n for k, v in self.sums.items() if k != "mismatch"}
        out["mismatch"] = self.sums.get("mismatch", 0.0) / self.fresh if self.fresh else None
        return {**out, "loss": self.loss, "ratio_max": self.ratio_max, "fresh_tokens": self.fresh}
