"""Shared test helpers: tiny checkpoints, and adapters trained (for real, by SFT) to say a scripted reply."""
import socket

import torch

import lora as L
import model as M
from chat import ChatFormat


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_scripted_adapter(ckpt, messages, reply, out_dir, tools=None, steps=150, lr=2e-2, seed=0):
    """Fine-tune a fresh LoRA so that, given `messages` (+ `tools`), the tiny model's greedy reply is
    `reply` (the raw assistant text, e.g. a tool call in the family's format) followed by end of turn.
    A real trained adapter standing in for a model that knows what to answer - nothing is mocked."""
    model, fmt = M.load_model(ckpt, dtype=torch.float32, device="cpu"), ChatFormat.from_checkpoint(ckpt)
    prompt = fmt.render(messages, tools=tools, add_generation_prompt=True)
    eos = fmt.tokenizer.token_to_id("<|im_end|>")
    target = fmt.encode(reply) + [eos]
    L.add_lora(model, rank=8, alpha=16, adapters=("sft",), seed=seed)
    L.set_adapter(model, "sft")
    params = L.lora_parameters(model, "sft")
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=lr)
    ids = torch.tensor([prompt + target])
    labels = torch.tensor(target)
    model.train()
    for step in range(steps):
        logits = model(ids[:, :-1])[0, len(prompt) - 1:]
        loss = torch.nn.functional.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.01:
            break
    model.eval()
    out, _ = model.generate(prompt, max_new_tokens=len(target) + 2, temperature=0, eos_ids={eos})
    assert out == target, f"scripted adapter did not learn its reply (loss {loss.item():.3f})"
    return L.save_adapter(model, out_dir, adapter="sft")
