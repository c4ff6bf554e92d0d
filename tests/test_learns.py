"""It learns: the tiny checkpoint + LoRA, sampled with generate, trained with grpo.py's functions on a toy
verifiable reward (the fraction of digits in a short answer), raises the mean reward clearly."""
import time

import torch

import checkpoint
import grpo
import lora
import rollout
import tiny
from chat import ChatFormat
from conftest import generate, grpo_loss


def digit_fraction(text):
    chars = [c for c in text if not c.isspace()]
    return sum(c.isdigit() for c in chars) / len(chars) if chars else 0.0


def test_grpo_raises_a_verifiable_reward(tmp_path):
    torch.manual_seed(0)
    path = tiny.write_tiny_checkpoint(tmp_path, "lfm3", seed=0)
    model, fmt = checkpoint.load_model(path, dtype=torch.float32, device="cpu"), ChatFormat.from_checkpoint(path)
    lora.add_lora(model, rank=8, alpha=16, adapters=("policy",), seed=0)
    lora.set_adapter(model, "policy")
    params = lora.lora_parameters(model, "policy")
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=2e-2, weight_decay=0.0)
    prompts = [fmt.render([{"role": "user", "content": q}]) for q in
               ("How many files?", "Count the rows.", "What is the total?", "Which year?")]
    history, t0 = [], time.time()
    for step in range(40):
        seqs, rewards = [], []
        model.eval()
        for i, prompt in enumerate(prompts):
            samples = generate(model, prompt, max_new_tokens=8, temperature=1.0, seed=1000 * step + i, n=8,
                                     eos_ids=fmt.eos_token_ids)
            r = [digit_fraction(fmt.decode(ids, skip_special_tokens=True)) for ids, _ in samples]
            rewards += r
            adv, signal = grpo.group_advantages(r)
            if signal:
                for (ids, lps), a in zip(samples, adv):
                    seqs += grpo.build_sequences([rollout.Turn(prompt, ids, lps, step)], a, rollout=f"{step}-{i}")
        history.append(sum(rewards) / len(rewards))
        if len(history) >= 3 and sum(history[-3:]) / 3 > 0.7:
            break
        packed = grpo.pack(seqs, token_budget=4096, micro_batches=2)
        assert not packed.waiting and not packed.truncated
        model.train()
        opt.zero_grad()
        for mb in packed.micro_batches:
            h = model(mb.input_ids, mb.position_ids, return_hidden=True)
            logp = grpo.token_logprobs(h, model.lm_head.weight, mb.targets)
            loss, stats = grpo_loss(logp, mb.old_logp, mb.advantages, mb.mask, totals=packed.totals)
            loss.backward()
        opt.step()
    start, end = sum(history[:3]) / 3, sum(history[-3:]) / 3
    print(f"mean reward {start:.2f} -> {end:.2f} in {len(history)} steps, {time.time() - t0:.0f}s")
    assert start < 0.2 and end > 0.6, history
