"""grpo.py: rewards, advantages, turn merging, staleness, packing properties, log-probs, the loss."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import flags
import grpo
from rollout import Turn
import tiny
from conftest import grpo_loss
from recipe import SHARED


# ----------------------------------------------------------------------------- rewards, advantages

REWARD = dict(bonus=0.1, scale=15, blocked_reward=0.0)


def test_shaped_reward_bonus_only_on_full_pass():
    assert grpo.shaped_reward(1.0, 3, 0, **REWARD) == pytest.approx(1 + 0.1 * (1 - 3 / 15))
    assert grpo.shaped_reward(1.0, 30, 0, **REWARD) == pytest.approx(1 + 0.1 * (1 - 2))   # many calls: below 1
    assert grpo.shaped_reward(0.5, 1, 0, **REWARD) == 0.5
    assert grpo.shaped_reward(0.0, 0, 0, **REWARD) == 0.0


def test_shaped_reward_guard_flag_zeroes_and_ungraded_stays_none():
    assert grpo.shaped_reward(1.0, 2, 1, **REWARD) == 0.0
    assert grpo.shaped_reward(None, 2, 1, **REWARD) is None


def test_group_advantages_match_hand_computation_and_skip_ungraded():
    adv, signal = grpo.group_advantages([1.0, None, 0.0, 0.5])
    mean, std = 0.5, math.sqrt(((0.5) ** 2 * 2) / 2)
    assert signal and adv[1] is None
    assert adv[0] == pytest.approx(0.5 / (std + 1e-6)) and adv[2] == pytest.approx(-0.5 / (std + 1e-6))
    assert adv[3] == pytest.approx(0.0)


def test_group_without_spread_has_no_signal():
    assert grpo.group_advantages([1.0, 1.0, None, 1.0]) == ([0.0, 0.0, None, 0.0], False)
    assert grpo.group_advantages([None, 0.3]) == ([None, None], False)


# ----------------------------------------------------------------------------- merging turns

def T(prompt, completion, version=0):
    return Turn(list(prompt), list(completion), [-0.1 * (i + 1) for i in range(len(completion))], version)


def test_turns_that_extend_merge_into_one_sequence():
    t1 = T([1, 2, 3], [10, 11])
    t2 = T([1, 2, 3, 10, 11, 50, 51], [12])          # tool output 50, 51 then the next completion
    t3 = T([1, 2, 3, 10, 11, 50, 51, 12, 60], [13, 14])
    (s,) = grpo.build_sequences([t1, t2, t3], advantage=0.7)
    assert s.tokens == [1, 2, 3, 10, 11, 50, 51, 12, 60, 13, 14]
    assert s.mask == [0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1]
    assert s.old_logp == pytest.approx([0, 0, 0, -0.1, -0.2, 0, 0, -0.1, 0, -0.1, -0.2])
    assert s.advantage == 0.7 and s.turns == 3


def test_reserialised_history_starts_a_new_sequence():
    t1 = T([1, 2, 3], [10, 11])
    t2 = T([1, 2, 3, 99, 50], [12])                  # the harness re-rendered turn 1 differently
    a, b = grpo.build_sequences([t1, t2], advantage=-1.0)
    assert a.tokens == [1, 2, 3, 10, 11] and b.tokens == [1, 2, 3, 99, 50, 12]
    assert b.mask == [0, 0, 0, 0, 0, 1] and a.advantage == b.advantage == -1.0


def test_fork_returns_to_an_older_sequence():
    main1 = T([1, 2], [10])
    side = T([7, 8], [20])                            # a sub-agent / summariser call in between
    main2 = T([1, 2, 10, 30], [11])
    a, b = grpo.build_sequences([main1, side, main2], advantage=1.0)
    assert a.tokens == [1, 2, 10, 30, 11] and b.tokens == [7, 8, 20]


def test_sequence_start_version_is_the_rollouts():
    seqs = grpo.build_sequences([T([1], [2], version=5), T([9], [3], version=7)], 1.0)
    assert [s.start_version for s in seqs] == [5, 5]


def test_each_token_keeps_the_version_that_sampled_it_through_merge_and_pack():
    seq, = grpo.build_sequences([T([1, 2], [3], version=5), T([1, 2, 3, 4], [6, 7], version=6)], 1.0)
    assert seq.tokens == [1, 2, 3, 4, 6, 7] and seq.versions == [5, 5, 5, 6, 6, 6]
    mb, = grpo.pack([seq], token_budget=64, micro_batches=1).micro_batches
    assert mb.versions.tolist() == [[5, 5, 6, 6, 6]]          # the targets' versions (tokens[1:])


def test_logprob_count_mismatch_is_an_error():
    with pytest.raises(ValueError, match="2 completion ids but 1 logprobs"):
        grpo.build_sequences([Turn([1], [2, 3], [-0.1], 0)], 1.0, rollout="r7")


def test_staleness_boundary_is_exact():
    items = [grpo.Sequence([1, 2], [0, 1], [0, 0], 1.0, start_version=v) for v in (6, 5, 4)]
    kept, dropped = grpo.drop_stale(items, current_version=10, max_staleness=4)
    assert [s.start_version for s in kept] == [6] and [s.start_version for s in dropped] == [5, 4]
    kept, _ = grpo.drop_stale(items, current_version=9, max_staleness=4)
    assert [s.start_version for s in kept] == [6, 5]


# ----------------------------------------------------------------------------- packing

def seq(n, i=0, trained=True):
    mask = [0] + [1 if trained else 0] * (n - 1)
    return grpo.Sequence(list(range(i, i + n)), mask, [-0.5] * n, float(i), rollout=str(i))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(2, 900), min_size=0, max_size=40), st.sampled_from([256, 1000, 2048]),
       st.integers(1, 4))
def test_pack_respects_budget_rows_and_accounts_for_every_sequence(lengths, budget, mb):
    seqs = [seq(n, i) for i, n in enumerate(lengths)]
    p = grpo.pack(seqs, budget, micro_batches=mb)
    cap = budget // mb
    assert len(p.micro_batches) <= mb
    assert p.tokens <= budget and all(m.num_tokens <= cap for m in p.micro_batches)
    packed = [s.rollout for m in p.micro_batches for s in m.sequences]
    waiting = [s.rollout for s in p.waiting]
    assert len(packed) + len(waiting) + p.dropped == len(seqs)
    assert len(set(packed + waiting)) == len(packed + waiting)      # nothing twice
    assert p.truncated == sum(1 for n in lengths if n - 1 > cap)
    assert waiting == sorted(waiting, key=int)                 # still oldest first
    if waiting:   # something waits only if it really did not fit
        first = next(s for s in p.waiting)
        assert p.tokens + min(len(first) - 1, cap) > budget or len(p.micro_batches) == mb


def test_pack_fifo_oldest_first_and_skipped_one_leads_next_step():
    seqs = [seq(300, 0), seq(300, 1), seq(900, 2), seq(100, 3)]
    p = grpo.pack(seqs, 1000, micro_batches=4)     # rows of 250: 300s are truncated to 250
    assert p.truncated == 3 and [s.rollout for s in p.waiting] == []
    p = grpo.pack([seq(241, 0), seq(241, 1), seq(241, 2), seq(201, 3), seq(101, 4), seq(11, 5)], 1000, 4)
    assert [s.rollout for s in p.waiting] == ["4"]      # did not fit the budget: leads the next step
    assert sorted(s.rollout for m in p.micro_batches for s in m.sequences) == ["0", "1", "2", "3", "5"]


def test_pack_drops_sequences_without_trained_tokens():
    p = grpo.pack([seq(10, 0, trained=False), seq(10, 1)], 100, 4)
    assert p.dropped == 1 and len(p.micro_batches) == 1


def test_packed_row_tensors_are_shifted_per_sequence():
    a = grpo.Sequence([5, 6, 7], [0, 1, 1], [0, -1, -2], 2.0)
    b = grpo.Sequence([8, 9], [0, 1], [0, -3], -1.0)
    (mb,) = grpo.pack([a, b], 100, micro_batches=1).micro_batches
    assert mb.input_ids.tolist() == [[5, 6, 8]] and mb.targets.tolist() == [[6, 7, 9]]
    assert mb.position_ids.tolist() == [[0, 1, 0]] and mb.mask.tolist() == [[1, 1, 1]]
    assert mb.old_logp.tolist() == [[-1, -2, -3]] and mb.advantages.tolist() == [[2, 2, -1]]


def test_pack_balances_rows():
    lengths = [500, 400, 300, 300, 200, 200, 100, 100]
    p = grpo.pack([seq(n + 1, i) for i, n in enumerate(lengths)], 2400, micro_batches=4)
    loads = sorted(m.num_tokens for m in p.micro_batches)
    assert loads[-1] - loads[0] <= 100 and sum(loads) == sum(lengths)


# ----------------------------------------------------------------------------- shared prefixes (tree packing)

def rollout(prompt, *parts, adv=1.0, name="", version=0):
    """A sequence: prompt (untrained), then alternating completion (trained) / tool output (untrained)."""
    tokens, mask = list(prompt), [0] * len(prompt)
    for k, part in enumerate(parts):
        tokens += part
        mask += [1 - k % 2] * len(part)
    old = [-0.1 - 0.01 * (i % 7) if m else 0.0 for i, m in enumerate(mask)]
    return grpo.Sequence(tokens, mask, old, adv, version, rollout=name, versions=[version] * len(tokens))


def toks(rng, n, lo=3, hi=600):
    return [rng.randrange(lo, hi) for _ in range(n)]


def group(rng, prompt_len=600, completion=40, k=8, multi_turn=True):
    """A GRPO group: k rollouts of one identical prompt with different completions, one of them multi-turn."""
    prompt = toks(rng, prompt_len)
    seqs = [rollout(prompt, toks(rng, completion), adv=rng.uniform(-1, 1), name=f"r{i}") for i in range(k)]
    if multi_turn:
        seqs.append(rollout(prompt, toks(rng, completion), toks(rng, 100), toks(rng, completion), adv=0.5, name="mt"))
    return seqs


def test_shared_prompt_is_computed_once_and_every_sequence_is_placed():
    import random
    seqs = group(random.Random(0))
    off = grpo.pack(seqs, 16384, micro_batches=4, min_shared=None)
    on = grpo.pack(seqs, 16384, micro_batches=4)
    assert not on.waiting and not off.waiting and on.dropped == off.dropped == 0
    placed = [s.rollout for mb in on.micro_batches for s in mb.sequences]
    assert sorted(placed) == sorted(s.rollout for s in seqs)
    assert on.loss_tokens == off.loss_tokens == 9 * 40 + 40
    assert on.tokens + on.shared_tokens == off.tokens and off.shared_tokens == 0
    assert on.shared_tokens == 8 * 599 and on.tokens < off.tokens / 4     # 8 branches share 599 input positions
    # sharing lets more of the queue into a step: 2 groups in a budget that holds ~1 without it
    rng = random.Random(1)
    two = group(rng, multi_turn=False) + group(rng, multi_turn=False)
    off, on = grpo.pack(two, 4000, 2, min_shared=None), grpo.pack(two, 4000, 2)
    assert len(off.waiting) == 10 and not on.waiting      # off: 3 of 639 tokens per row of 2000 and on.tokens <= 4000
    assert all(mb.num_tokens <= 2000 for mb in on.micro_batches)


def test_a_tree_longer_than_a_row_is_split():
    import random
    import model
    seqs = group(random.Random(2), prompt_len=300, completion=40, k=20, multi_turn=False)
    p = grpo.pack(seqs, 2400, micro_batches=4)          # rows of 600: a root (339) + 6 branches (41 each) per row
    assert not p.waiting and sum(len(mb.sequences) for mb in p.micro_batches) == 20
    for mb in p.micro_batches:
        assert mb.num_tokens <= 600 and mb.shared.count(0) >= 1
        seg = model.find_segments(mb.position_ids)       # the row decodes to the trees pack meant
        assert [x for x in seg.shared] == mb.shared


def test_no_sharing_over_a_trained_token_or_a_different_target():
    import random
    rng = random.Random(3)
    prompt, c = toks(rng, 100), toks(rng, 10)
    # b's prompt is a's whole first turn re-rendered: same tokens, but a's tokens 50.. are trained in a
    a = rollout(prompt[:50], prompt[50:], toks(rng, 5), toks(rng, 5))
    b = rollout(prompt + toks(rng, 5), c)
    (mb,) = grpo.pack([a, b], 4096, micro_batches=1).micro_batches
    assert mb.shared == [0, 49]                       # inputs 0..48 (targets 1..49) only: 50 is trained in a
    a2 = rollout(prompt[:20], prompt[20:], c)         # trained from token 20: below MIN_SHARED, not merged
    assert grpo.pack([a2, b], 4096, micro_batches=1).micro_batches[0].shared == [0, 0]
    # same first 40 tokens, then a different (untrained) token: 39 inputs shared, input 39's target differs
    x, y = rollout(prompt[:40] + [7] * 10, c), rollout(prompt[:40] + [8] * 10, c)
    (mb,) = grpo.pack([x, y], 4096, micro_batches=1).micro_batches
    assert mb.shared == [0, 39]
    n = len(x) - 1
    assert mb.position_ids[0, n].item() == 39 and mb.input_ids[0, n].item() == prompt[39]
    assert mb.targets[0, n].item() == 8 and mb.mask[0, n:].tolist() == y.mask[40:]
    assert grpo.pack([x, y], 4096, micro_batches=1, min_shared=None).micro_batches[0].shared == [0, 0]


def _loss_and_grads(model, params, packed):
    for p in params:
        p.grad = None
    total = 0.0
    for mb in packed.micro_batches:
        h = model(mb.input_ids, mb.position_ids, return_hidden=True)
        logp = grpo.token_logprobs(h, model.lm_head.weight, mb.targets, temperature=0.7)
        loss, _ = grpo_loss(logp, mb.old_logp, mb.advantages, mb.mask, totals=packed.totals)
        loss.backward()
        total += loss.item()
    return total, [p.grad.clone() for p in params]


@pytest.mark.parametrize("model_type", ["lfm2", "lfm2_moe", "lfm3", "llama", "qwen3"])
def test_shared_prefix_loss_and_lora_gradients_equal_unshared(tmp_path, model_type):
    import random
    import lora
    import checkpoint
    model = checkpoint.load_model(tiny.write_tiny_checkpoint(tmp_path, model_type), dtype=torch.float32, device="cpu")
    lora.add_lora(model, rank=4, alpha=8, adapters=("p",), seed=0)
    lora.set_adapter(model, "p")
    params = lora.lora_parameters(model, "p")
    torch.manual_seed(0)
    with torch.no_grad():
        for p in params:                                # B = 0 would leave A without gradient
            p.normal_(0, 0.05)
            p.requires_grad_(True)
    rng, V = random.Random(4), model.config.vocab_size
    prompt = toks(rng, 45, hi=V)
    seqs = [rollout(prompt, toks(rng, n, hi=V), adv=rng.uniform(-1, 1), name=str(i)) for i, n in enumerate([9, 2, 14])]
    seqs.append(rollout(prompt, toks(rng, 6, hi=V), toks(rng, 7, hi=V), toks(rng, 5, hi=V), adv=-0.7, name="mt"))
    seqs.append(rollout(toks(rng, 20, hi=V), toks(rng, 8, hi=V), adv=0.3, name="other"))     # its own tree
    seqs.append(rollout(prompt[:40] + toks(rng, 6, hi=V), toks(rng, 4, hi=V), adv=0.9, name="short"))  # 39 shared
    with torch.no_grad():                               # behaviour logprobs near the policy's: weights ~ 1
        for s in seqs:
            h = model(torch.tensor([s.tokens[:-1]]), return_hidden=True)
            lp = grpo.token_logprobs(h, model.lm_head.weight, torch.tensor([s.tokens[1:]]), temperature=0.7)[0]
            s.old_logp = [0.0] + [(x + 0.2 * rng.uniform(-1, 1)) * m for x, m in zip(lp.tolist(), s.mask[1:])]
    model.train()
    on, off = grpo.pack(seqs, 2048, micro_batches=2), grpo.pack(seqs, 2048, micro_batches=2, min_shared=None)
    assert on.shared_tokens == 3 * 44 + 39 and on.loss_tokens == off.loss_tokens and not on.waiting
    loss_on, g_on = _loss_and_grads(model, params, on)
    loss_off, g_off = _loss_and_grads(model, params, off)
    assert loss_on == pytest.approx(loss_off, abs=1e-5)
    # 1e-4 as test_model's packed-backward checks: LFM3's gradients (up to ~3) differ by ~3e-6 in fp32 noise
    assert max((a - b).abs().max().item() for a, b in zip(g_on, g_off)) <= 1e-4
    assert max(g.abs().max().item() for g in g_off) > 1e-3      # the gradients are not trivially zero


# ----------------------------------------------------------------------------- log-probs, loss

@pytest.mark.parametrize("weight_trains", [False, True])
def test_chunked_logprobs_equal_naive_values_and_gradients(weight_trains):
    torch.manual_seed(0)
    h = torch.randn(2, 37, 16, requires_grad=True)
    w = torch.randn(101, 16, requires_grad=weight_trains)
    t = torch.randint(0, 101, (2, 37))
    upstream = torch.randn(2, 37)          # a non-uniform upstream gradient, as the loss gives
    got = grpo.token_logprobs(h, w, t, chunk=8)
    want = torch.log_softmax(h @ w.t(), -1).gather(-1, t[..., None])[..., 0]
    assert torch.allclose(got, want, atol=1e-5)
    wrt = (h, w) if weight_trains else (h,)
    g1 = torch.autograd.grad((got * upstream).sum(), wrt)
    g2 = torch.autograd.grad((want * upstream).sum(), wrt)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(g1, g2))    # gradients ~1-10, summed per chunk
    with torch.no_grad():
        assert torch.allclose(grpo.token_logprobs(h, w, t, chunk=5), want, atol=1e-5)


def test_default_chunk_holds_a_large_vocabulary_to_the_logit_block(monkeypatch):
    """The default chunk is sized by logits, not tokens: a 49k vocabulary (SmolLM2) takes 682-token chunks of
    LOGIT_BLOCK logits, where 2 048 tokens would hold 3x that; the values equal the naive ones either way."""
    seen = []
    real = grpo._TokenLogprobs.apply
    monkeypatch.setattr(grpo._TokenLogprobs, "apply", lambda h, w, t, chunk: seen.append(chunk) or real(h, w, t, chunk))
    torch.manual_seed(0)
    h, t = torch.randn(1, 9, 8), torch.randint(0, 100, (1, 9))
    for vocab, block, want in ((100, grpo.LOGIT_BLOCK, 2048), (49152, grpo.LOGIT_BLOCK, grpo.LOGIT_BLOCK // 49152),
                               (300, 200, 1)):       # a vocabulary over the block: one token a chunk
        monkeypatch.setattr(grpo, "LOGIT_BLOCK", block)
        w = torch.randn(vocab, 8)
        with torch.no_grad():
            got = grpo.token_logprobs(h, w, t)
        assert seen[-1] == want
        assert torch.allclose(got, torch.log_softmax(h @ w.t(), -1).gather(-1, t[..., None])[..., 0], atol=1e-5)


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.3])
def test_logprobs_at_the_sampling_temperature_equal_the_samplers(temperature):
    """The trainer's pi is of the distribution the server sampled from (engine.sample: processed logprobs)."""
    import engine
    torch.manual_seed(0)
    h, w = torch.randn(6, 16, requires_grad=True), torch.randn(101, 16)
    tok, lp = engine.sample(h.detach() @ w.t(), [temperature] * 6, [1.0] * 6, [0] * 6, [0] * 6, list(range(6)))
    sampled = list(zip(tok.tolist(), lp.tolist()))
    got = grpo.token_logprobs(h, w, torch.tensor([t for t, _ in sampled]), chunk=4, temperature=temperature)
    assert torch.allclose(got, torch.tensor([lp for _, lp in sampled]), atol=1e-5)
    got.sum().backward()                      # and the gradient flows through the scaling
    assert h.grad is not None and torch.isfinite(h.grad).all()
    if temperature != 1.0:                    # without it, pi and mu differ: the mismatch this fixes
        plain = grpo.token_logprobs(h.detach(), w, torch.tensor([t for t, _ in sampled]))
        assert (plain - got.detach()).abs().max() > 1e-2


def test_loss_equals_hand_computed_reference():
    logp = torch.tensor([-1.0, -0.5, -2.0, -0.1])
    old = torch.tensor([-1.2, -0.5, -1.0, -0.1])
    adv = torch.tensor([1.0, 1.0, -1.0, 2.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0])
    loss, stats = grpo_loss(logp, old, adv, mask, objective="clip")
    r = [math.exp(0.2), 1.0, math.exp(-1.0)]
    terms = [max(-1 * r[0], -1 * min(max(r[0], 0.8), 1.28)), -1.0, max(1 * r[2], 1 * min(max(r[2], 0.8), 1.28))]
    assert loss.item() == pytest.approx(sum(terms) / 3, rel=1e-6)
    assert stats["clip_frac"].item() == pytest.approx(1 / 3)     # token 3: A<0 and ratio < 0.8
    assert stats["ratio_max"].item() == pytest.approx(r[0], rel=1e-6)


def test_tis_gradient_equals_hand_computation_with_truncation_at_C():
    """d/dlogp of -min(exp(logp - mu), C) * A * exp(logp - sg(logp)), by hand: -min(r, C) * A / n."""
    logp = torch.tensor([-1.0, -0.5, -2.0, -0.1, -0.3], requires_grad=True)
    mu = torch.tensor([-1.2, -1.5, -1.0, -0.1, -0.3])       # r = e^0.2, e^1.0 (> C = 2), e^-1.0, 1, 1
    adv = torch.tensor([1.0, -2.0, -1.0, 2.0, 5.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])
    loss, stats = grpo_loss(logp, mu, adv, mask, objective="tis", tis_cap=2.0)
    (g,) = torch.autograd.grad(loss, logp)
    w = [math.exp(0.2), 2.0, math.exp(-1.0), 1.0]            # e^1.0 = 2.718 is truncated to C = 2
    want = [-w[i] * adv[i].item() / 4 for i in range(4)] + [0.0]
    assert g.tolist() == pytest.approx(want, rel=1e-6)
    assert loss.item() == pytest.approx(sum(-w[i] * adv[i].item() for i in range(4)) / 4, rel=1e-6)
    assert stats["trunc_frac"].item() == pytest.approx(1 / 4) and stats["clip_frac"].item() == 0
    assert stats["is_weight"].item() == pytest.approx(sum(w) / 4, rel=1e-6)


def test_mismatch_is_measured_on_fresh_tokens_only():
    logp = torch.tensor([-1.0, -1.0, -1.0])
    mu = torch.tensor([-1.1, -3.0, -1.0])
    fresh = torch.tensor([1, 0, 1])                           # token 2 came from an older version
    _, st = grpo_loss(logp, mu, torch.ones(3), torch.ones(3), fresh=fresh)
    assert st["mismatch"].item() == pytest.approx(0.05, rel=1e-5) and st["fresh_tokens"].item() == 2


def test_ratio_one_is_plain_policy_gradient():
    logp = torch.tensor([-1.0, -2.0, -0.3], requires_grad=True)
    adv = torch.tensor([0.5, -1.5, 2.0])
    for objective in ("clip", "tis"):
        loss, _ = grpo_loss(logp, logp.detach(), adv, torch.ones(3), objective=objective)
        (g,) = torch.autograd.grad(loss, logp)
        assert torch.allclose(g, -adv / 3)


def test_clipping_zeroes_gradients_where_it_should():
    old = torch.zeros(4)
    logp = torch.tensor([0.5, 0.5, -0.5, -0.5], requires_grad=True)       # ratios 1.65, 1.65, 0.61, 0.61
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, _ = grpo_loss(logp, old, adv, torch.ones(4), objective="clip")
    (g,) = torch.autograd.grad(loss, logp)
    assert g[0] == 0 and g[3] == 0        # A>0 above 1+eps_high, A<0 below 1-eps_low: clipped, no gradient
    assert g[1] != 0 and g[2] != 0        # the pessimistic side keeps its gradient


def test_ratio_cap_bounds_the_negative_side():
    logp = torch.tensor([3.0], requires_grad=True)
    loss, _ = grpo_loss(logp, torch.zeros(1), torch.tensor([-1.0]), torch.ones(1), objective="clip", ratio_cap=5.0)
    (g,) = torch.autograd.grad(loss, logp)
    assert loss.item() == pytest.approx(5.0) and g.item() == 0


@pytest.mark.parametrize("objective", ["tis", "clip"])
def test_step_token_mean_over_micro_batches_equals_one_batch(objective):
    torch.manual_seed(1)
    logp = torch.randn(10, requires_grad=True)
    old, adv = torch.randn(10) * 0.1 + logp.detach(), torch.randn(10)
    mask = (torch.rand(10) > 0.3).float()
    full, _ = grpo_loss(logp, old, adv, mask, objective=objective)
    (g_full,) = torch.autograd.grad(full, logp)
    n = mask.sum()
    parts = [grpo_loss(logp[s], old[s], adv[s], mask[s], totals=grpo.Totals(int(n)), objective=objective)[0]
             for s in (slice(0, 4), slice(4, 10))]
    (g_acc,) = torch.autograd.grad(sum(parts), logp)
    assert torch.allclose(sum(parts), full) and torch.allclose(g_acc, g_full)


def test_rollout_reduction_weighs_every_rollout_once_whatever_its_length():
    """--reduce rollout over packed rows is GRPO's (1/N) sum_i (1/L_i) sum_t: the gradient on a token of rollout i
    is -A_i / (N * L_i) (on-policy tis, by hand). Rollout "a" spans two sequences (a re-rendered history): its L
    counts both."""
    def seq(n_prompt, n_gen, adv, rollout):
        return grpo.Sequence(list(range(1, n_prompt + n_gen + 1)), [0] * n_prompt + [1] * n_gen,
                          [0.0] * n_prompt + [-0.5] * n_gen, adv, 0, rollout)
    seqs = [seq(3, 10, 1.5, "a"), seq(5, 30, 1.5, "a"), seq(4, 8, -0.5, "b"), seq(2, 200, -0.4, "c")]
    length = {"a": 40, "b": 8, "c": 200}
    packed = grpo.pack(seqs, 10_000, 2)
    grads, want = [], []
    for mb in packed.micro_batches:
        logp = mb.old_logp.clone().requires_grad_(True)
        loss, _ = grpo_loss(logp, mb.old_logp, mb.advantages, mb.mask, totals=packed.totals, objective="tis",
                            reduce="rollout", rollout_tokens=mb.rollout_tokens)
        (g,) = torch.autograd.grad(loss, logp)
        grads += g[mb.mask.bool()].tolist()
    for s in seqs:
        want += [-s.advantage / (3 * length[s.rollout])] * sum(s.mask)
    assert sorted(grads) == pytest.approx(sorted(want), rel=1e-5)
    assert sum(grads) == pytest.approx(-(1.5 - 0.5 - 0.4) / 3, rel=1e-5)     # each rollout sums to -A_i / N
    with pytest.raises(SystemExit, match="--reduce"):
        flags.validate({**SHARED, "reduce": "sequence"})


def test_kl_term_needs_reference_and_is_zero_at_reference():
    logp = torch.tensor([-1.0, -2.0])
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, logp, torch.ones(2), torch.ones(2), beta=0.1)
    loss0, _ = grpo_loss(logp, logp, torch.ones(2), torch.ones(2))
    loss1, stats = grpo_loss(logp, logp, torch.ones(2), torch.ones(2), beta=0.1, ref_logp=logp)
    assert loss1.item() == pytest.approx(loss0.item()) and stats["kl"].item() == pytest.approx(0.0)
