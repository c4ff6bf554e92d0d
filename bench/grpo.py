"""grpo.py's three efficiency claims, measured side by side in one run:

  (a) trained tokens for a 15-turn agent session: turns merged into sequences (build_sequences) vs
      one row per turn (each turn's whole prompt + completion), rendered with the real chat templates
      of the tiny checkpoints (LFM2 pythonic, LFM3 XML, Qwen3 JSON tool calls);
  (b) packing fill of the step's token budget on a realistic length mix (lognormal session lengths,
      median 6k tokens), over many steps of a FIFO queue fed with groups of 8;
  (c) peak memory (and time) of the chunked log-prob vs the naive full-logits one on a 128k vocabulary,
      each measured in its own child process;
  (d) shared-prefix (tree) packing: tokens computed per step and forward+backward seconds (LoRA, the
      GRPO loss) with sharing on vs off, on the tiny lfm3 and llama checkpoints (and --model ones), for
      a GRPO step of 2 groups x 8 rollouts with a 600-token prompt per group and 48-token completions,
      a multi-turn one (3 completions of 48 with 150-token tool outputs between them), and one shaped like a
      tiny pi step (5 groups, a 4 000-token prompt each, 3 turns).

    python bench/grpo.py                 # all four, CPU
    python bench/grpo.py --only c --tokens 8192 --hidden 2048 --device cuda
    python bench/grpo.py --only d --model SmolLM2-135M-Instruct
"""
import argparse
import multiprocessing as mp
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import grpo  # noqa: E402
from rollout import Turn  # noqa: E402
from recipe import SHARED, loss_settings  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": n, "description": d, "parameters": {
    "type": "object", "properties": {k: {"type": "string"} for k in ks}, "required": list(ks)}}}
    for n, d, ks in [("bash", "Run a shell command in the work dir.", ["command"]),
                     ("read", "Read a file.", ["path"]),
                     ("write", "Write a file.", ["path", "content"]),
                     ("edit", "Replace text in a file.", ["path", "old", "new"])]]


def session(rng, turns=15):
    """A plausible coding-agent conversation: long system prompt, task, 15 tool calls with outputs."""
    system = "You are a coding agent working in a sandbox. " + " ".join(
        f"Rule {i}: keep changes minimal, run the tests, and explain what you did." for i in range(60))
    msgs = [{"role": "system", "content": system},
            {"role": "user", "content": "Fix the failing test in tests/test_parse.py without editing the test."}]
    for t in range(turns):
        name = rng.choice(["bash", "read", "edit", "bash"])
        args = {"bash": {"command": f"python -m pytest -x -q tests/test_parse.py -k case{t}"},
                "read": {"path": f"src/parse_{t}.py"},
                "edit": {"path": f"src/parse_{t}.py", "old": "return x", "new": "return x.strip()"}}[name]
        output = "\n".join(f"line {i}: value = {rng.randint(0, 10**6)} # {name} output" for i in range(rng.randint(5, 40)))
        msgs.append({"role": "assistant", "content": f"Step {t}: checking with {name}.",
                     "tool_calls": [{"id": f"call_{t}", "type": "function",
                                     "function": {"name": name, "arguments": args}}]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{t}", "content": output})
    return msgs


def bench_merge(args):
    from chat import ChatFormat
    from tiny import write_tiny_checkpoint

    print("(a) trained tokens per 15-turn session: merged sequences vs one row per turn")
    print(f"    {'template':<10}{'turns':>6}{'sequences':>10}{'merged tok':>12}{'per-turn tok':>14}{'fewer':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for family in ("lfm2", "lfm3", "qwen3"):
            fmt = ChatFormat.from_checkpoint(write_tiny_checkpoint(Path(tmp) / family, family))
            msgs = session(random.Random(0))
            turns = []
            for i, m in enumerate(msgs):
                if m["role"] != "assistant":
                    continue
                prompt = fmt.render(msgs[:i], tools=TOOLS, add_generation_prompt=True)
                full = fmt.render(msgs[:i + 1], tools=TOOLS, add_generation_prompt=False)
                assert full[:len(prompt)] == prompt, family
                completion = full[len(prompt):]
                # the model generates up to and including its end-of-turn token; what follows is template text
                end = next((k + 1 for k, tok in enumerate(completion) if tok in fmt.eos_token_ids), len(completion))
                turns.append(Turn(prompt, completion[:end], [-0.5] * end, 0))
            seqs = grpo.build_sequences(turns, 1.0)
            merged = sum(len(s) for s in seqs)
            per_turn = sum(len(t.prompt_ids) + len(t.completion_ids) for t in turns)
            print(f"    {family:<10}{len(turns):>6}{len(seqs):>10}{merged:>12}{per_turn:>14}{per_turn / merged:>7.1f}x")


def bench_pack(args):
    print(f"(b) packing fill: budget {args.budget}, {args.micro_batches} micro-batches, lognormal lengths "
          f"(median {args.median}), {args.steps} steps")
    rng = random.Random(0)
    queue, fills, waits, truncated, arrivals = [], [], [], 0, 0
    born = {}
    for step in range(args.steps):
        while sum(len(s) for s in queue) < 2 * args.budget:      # sessions keep finishing in groups of 8
            for _ in range(8):
                n = int(min(max(rng.lognormvariate(0, 0.8) * args.median, 300), 60000))
                s = grpo.Sequence([0] * n, [0] + [1] * (n - 1), [0.0] * n, 1.0, rollout=str(arrivals))
                born[s.rollout] = step
                queue.append(s)
                arrivals += 1
        p = grpo.pack(queue, args.budget, args.micro_batches)
        fills.append(p.fill)
        truncated += p.truncated
        for mb in p.micro_batches:
            waits += [step - born[s.rollout] for s in mb.sequences]
        queue = p.waiting + [s for s in queue if s.rollout not in {x.rollout for x in p.waiting}
                             and s.rollout not in {x.rollout for mb in p.micro_batches for x in mb.sequences}]
    rows = [len(mb.sequences) for mb in p.micro_batches]
    print(f"    mean fill {statistics.mean(fills):.1%} (min {min(fills):.1%}), truncated {truncated} of "
          f"{arrivals} sequences, max wait {max(waits)} steps, last step rows {rows}")


def _logp_child(kind, args, q):
    dev = torch.device(args.device)
    torch.manual_seed(0)
    w = (torch.randn(args.vocab, args.hidden, device=dev) * 0.02)
    h = torch.randn(args.tokens, args.hidden, device=dev, requires_grad=True)
    t = torch.randint(0, args.vocab, (args.tokens,), device=dev)
    before = _mem(dev, reset=True)
    t0 = time.perf_counter()
    if kind == "naive":
        logp = torch.log_softmax((h @ w.t()).float(), -1).gather(-1, t[:, None])[:, 0]
    else:
        logp = grpo.token_logprobs(h, w, t, chunk=args.chunk)
    logp.sum().backward()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    q.put((kind, _mem(dev) - before, time.perf_counter() - t0))


def _mem(dev, reset=False):
    if dev.type == "cuda":
        if reset:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return torch.cuda.memory_allocated()
        return torch.cuda.max_memory_allocated()
    if reset:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    field = "VmRSS:" if reset else "VmHWM:"
    return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith(field)) * 1024


def bench_logp(args):
    print(f"(c) log-probs of {args.tokens} tokens, hidden {args.hidden}, vocab {args.vocab}, fp32, forward+backward "
          f"on {args.device}")
    ctx, res = mp.get_context("spawn"), {}
    for kind in ("naive", "chunked"):
        q = ctx.Queue()
        p = ctx.Process(target=_logp_child, args=(kind, args, q))
        p.start()
        k, mem, secs = q.get()
        p.join()
        res[k] = (mem, secs)
    for k, (mem, secs) in res.items():
        print(f"    {k + (f' (chunk {args.chunk})' if k == 'chunked' else ''):<22} peak +{mem / 2**30:6.2f} GiB  "
              f"{secs:6.2f} s  memory {mem / res['naive'][0]:.2f}x of naive")


def tree_step(rng, turns, groups=2, k=8, prompt=600, completion=48, tool=150, vocab=500):
    """One step's sequences: `groups` tasks x k rollouts, each group one prompt, `turns` completions apart."""
    toks = lambda n: [rng.randrange(3, vocab) for _ in range(n)]   # noqa: E731
    seqs = []
    for g in range(groups):
        p = toks(prompt)
        for i in range(k):
            tokens, mask = list(p), [0] * prompt
            for t in range(turns):
                if t:
                    tokens += toks(tool)
                    mask += [0] * tool
                tokens += toks(completion)
                mask += [1] * completion
            old = [-1.0 * m for m in mask]
            seqs.append(grpo.Sequence(tokens, mask, old, rng.uniform(-1, 1), rollout=f"{g}-{i}"))
    return seqs


def bench_tree(args):
    import lora
    from checkpoint import load_model
    from tiny import write_tiny_checkpoint

    print(f"(d) shared-prefix packing, budget {args.tree_budget} (more when the unshared step needs it), "
          f"{args.micro_batches} micro-batches, "
          f"forward+backward (LoRA r16, GRPO loss) on {args.device}, best of {args.repeats}")
    print(f"    {'model':<24}{'step':<22}{'tokens off':>11}{'on':>7}{'fewer':>7}{'s off':>8}{'s on':>7}{'faster':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        models = [(f, write_tiny_checkpoint(Path(tmp) / f, f)) for f in ("lfm3", "llama")]
        models += [(m, m) for m in args.model or []]
        for name, path in models:
            model = load_model(path, dtype=torch.float32, device=args.device)
            lora.add_lora(model, rank=16, alpha=32, adapters=("p",), seed=0)
            lora.set_adapter(model, "p")
            for p in lora.lora_parameters(model, "p"):
                p.requires_grad_(True)
            model.train()
            vocab = min(model.config.vocab_size, 30000)
            for label, turns, groups, prompt in (("2x8, 600 + 48", 1, 2, 600), ("2x8, 3 turns", 3, 2, 600),
                                                 ("5x8, 4000, 3 turns", 3, 5, 4000)):
                seqs = tree_step(random.Random(0), turns, groups, prompt=prompt, vocab=vocab)
                need = sum(len(s) - 1 for s in seqs)        # the budget fits the whole step even unshared
                q = 1024 * args.micro_batches
                budget = max(args.tree_budget, -(-int(need * 1.15) // q) * q)
                res = {}
                for share in (None, grpo.MIN_SHARED):
                    p = grpo.pack(seqs, budget, args.micro_batches, min_shared=share)
                    assert not p.waiting, "the step does not fit"
                    best = float("inf")
                    for _ in range(args.repeats):
                        model.zero_grad(set_to_none=True)
                        t0 = time.perf_counter()
                        for mb in p.micro_batches:
                            dev = lambda x: x.to(args.device)   # noqa: E731
                            h = model(dev(mb.input_ids), dev(mb.position_ids), return_hidden=True)
                            logp = grpo.token_logprobs(h, model.lm_head.weight, dev(mb.targets))
                            loss, _ = grpo.grpo_loss(logp, dev(mb.old_logp), dev(mb.advantages), dev(mb.mask),
                                                  totals=p.totals, **loss_settings(SHARED))
                            loss.backward()
                        if args.device.startswith("cuda"):
                            torch.cuda.synchronize()
                        best = min(best, time.perf_counter() - t0)
                    res[share] = (p.tokens, best)
                (t_off, s_off), (t_on, s_on) = res[None], res[grpo.MIN_SHARED]
                print(f"    {Path(str(name)).name[:23]:<24}{label:<22}{t_off:>11}{t_on:>7}{t_off / t_on:>6.1f}x"
                      f"{s_off:>8.2f}{s_on:>7.2f}{s_off / s_on:>7.1f}x")
            del model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["a", "b", "c", "d"])
    ap.add_argument("--budget", type=int, default=65536)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--median", type=int, default=6000)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=128000)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tree-budget", type=int, default=16384, help="(d) the step's token budget (CPU recipe)")
    ap.add_argument("--repeats", type=int, default=2, help="(d) timed repeats per case (best is shown)")
    ap.add_argument("--model", action="append", help="(d) also time this checkpoint (name or path; repeatable)")
    args = ap.parse_args()
    for key, fn in (("a", bench_merge), ("b", bench_pack), ("c", bench_logp), ("d", bench_tree)):
        if args.only in (None, key):
            fn(args)


if __name__ == "__main__":
    main()
