"""Shared test helpers: tiny checkpoints, and adapters trained (for real, by SFT) to say a scripted reply."""
import random
import socket

import torch

import checkpoint
import engine
import grpo
import lora
from chat import ChatFormat
from recipe import SHARED, loss_settings


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_scripted_adapter(ckpt, messages, reply, out_dir, tools=None, steps=150, lr=2e-2, seed=0):
    """Fine-tune a fresh LoRA so that, given `messages` (+ `tools`), the tiny model's greedy reply is
    `reply` (the raw assistant text, e.g. a tool call in the family's format) followed by end of turn.
    A real trained adapter standing in for a model that knows what to answer - nothing is mocked."""
    model, fmt = checkpoint.load_model(ckpt, dtype=torch.float32, device="cpu"), ChatFormat.from_checkpoint(ckpt)
    prompt = fmt.render(messages, tools=tools, add_generation_prompt=True)
    eos = fmt.tokenizer.token_to_id("<|im_end|>")
    target = fmt.encode(reply) + [eos]
    lora.add_lora(model, rank=8, alpha=16, adapters=("sft",), seed=seed)
    lora.set_adapter(model, "sft")
    params = lora.lora_parameters(model, "sft")
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
    out, _ = generate(model, prompt, max_new_tokens=len(target) + 2, temperature=0, eos_ids={eos})
    assert out == target, f"scripted adapter did not learn its reply (loss {loss.item():.3f})"
    return lora.save_adapter(model, out_dir, adapter="sft")


@torch.no_grad()
def generate(model, prompt_ids, max_new_tokens=64, temperature=1.0, top_p=1.0, seed=None, eos_ids=(), n=None):
    """Sample a continuation of one prompt (list of ids) with the model's cache (the server's decode loop is
    engine.py's; this one is for tests); returns (new ids, their logprobs under the distribution actually sampled). temperature 0 = greedy. With `n`, samples n continuations in one
    batch (rows share the prompt) and returns a list of n such pairs."""
    rows = n or 1
    seed = seed if seed is not None else random.getrandbits(62)
    seeds = [hash((seed, r)) for r in range(rows)]     # rows sharing a prompt draw apart (tuples of ints hash stably)
    cache = model.new_cache(rows, len(prompt_ids) + max_new_tokens)
    logits = model(torch.tensor([prompt_ids] * rows, device=model.device), cache=cache)[:, -1]
    outs, eos = [([], []) for _ in range(rows)], set(eos_ids)
    done = [False] * rows
    for step in range(max_new_tokens):
        drawn = engine.sample(logits, [temperature] * rows, [top_p] * rows, [0] * rows, seeds, [step] * rows)
        toks = drawn[0].tolist()
        for r, (tok, lp) in enumerate(zip(toks, drawn[1].tolist())):
            if not done[r]:
                outs[r][0].append(tok)
                outs[r][1].append(lp)
                done[r] = tok in eos
        if all(done):
            break
        logits = model(torch.tensor([[t] for t in toks], device=model.device), cache=cache)[:, -1]
    return outs if n else outs[0]


def grpo_loss(*a, **kw):
    """grpo.grpo_loss with the recipe's loss settings from recipe.py's table (it takes them explicitly)."""
    return grpo.grpo_loss(*a, **{**loss_settings(SHARED), **kw})


def write_length_suite(root, n=3):
    """n tasks scored 1, 0.5 or 0 by the length of the answer (mod 3): rewards that differ within a group
    whatever the model, so every step has something to learn from."""
    for i in range(n):
        d = root / f"len-{i}"
        for sub in ("environment", "tests", "solution"):
            (d / sub).mkdir(parents=True)
        (d / "environment" / "README.md").write_text("empty\n")
        (d / "instruction.md").write_text("Say something.\n")
        (d / "task.toml").write_text(f'[task]\nname = "len-{i}"\n[metadata]\nsource = "toy"\ntype = "qa"\n'
                                     '[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 10\n')
        (d / "tests" / "test.sh").write_text(
            '#!/bin/bash\nn=$(wc -c < "$AGENT_OUTPUT")\ncase $((n % 3)) in 0) s=1;; 1) s=0.5;; *) s=0;; esac\n'
            'echo $s > "$LOGS_DIR/reward.txt"\n')
        (d / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    return root


def harbor_template_task(root, name="hello-harbor"):
    """Harbor's own template task (harbor/cli/template-task in the harbor 0.25.0 wheel from PyPI), laid out as
    `harbor task init --no-pytest` does and filled as a user would: an instruction, a tests/test.sh writing
    /logs/verifier/reward.txt, a solution/solve.sh - Harbor's absolute paths (/app, /tests, /logs/verifier) and all."""
    import shutil
    from pathlib import Path

    import harnesses
    template = harnesses.INSTALLS["harbor"].install(quiet=True) / "lib" / "harbor" / "cli" / "template-task"
    d = Path(root) / name
    d.mkdir(parents=True)
    for part in ("instruction.md", ".gitignore", "task.toml"):
        shutil.copyfile(template / part, d / part)
    for part in ("environment", "tests", "solution"):
        shutil.copytree(template / part, d / part)
    with open(d / "task.toml", "a") as f:
        f.write(f'\n[task]\nname = "acme/{name}"\n')
    (d / "instruction.md").write_text("Write the product of 1234 and 5678 to /app/answer.txt.\n")
    with open(d / "tests" / "test.sh", "a") as f:
        f.write('\nif [ "$(cat /app/answer.txt)" = "7006652" ]; then echo 1 > /logs/verifier/reward.txt\n'
                'else echo 0 > /logs/verifier/reward.txt; fi\n')
    with open(d / "solution" / "solve.sh", "a") as f:
        f.write("\necho $((1234 * 5678)) > /app/answer.txt\n")
    return d
