"""One GRPO training step at the recipe's scale on a GPU: LFM3-1.7B-shaped random weights (bf16), rank-32
LoRA on every linear layer, a 65 536-token step packed into 4 micro-batches from a realistic length mix (groups of
8 rollouts sharing a prompt: branched packing), chunked log-probs + the clipped loss + backward + AdamW. Prints step
time, trained tokens/s, MFU and peak memory, with and without activation checkpointing, for the per-segment SDPA
path (the default) and, with --attention sdpa,flex, the fused flex_attention one (model.fused_attention) beside it.

    python bench/gpu.py [--budget 65536] [--steps 3] [--peak-tflops 989]
    torchrun --nproc-per-node 2 bench/gpu.py --parallel     # the same step on 2 GPUs: DDP and FSDP2 rows
    torchrun --nproc-per-node 2 bench/gpu.py --parallel --smoke     # CPU (gloo), a tiny shape: the script runs

--parallel (under torchrun): the step as train.py runs it on N ranks - parallel.wrap (DDP, then FSDP2), the
micro-batches split across ranks (parallel.optimizer_step), gradients summed - one row per mode, step time of the
slowest rank, tokens/s of the whole step, peak memory of rank 0. The step's tokens are the same as one
process's: at 2 ranks each does half.

MFU counts the matmul FLOPs a LoRA step must do: forward 2*N*T plus the input-gradient half of backward
2*N*T for the frozen base (no weight gradients), the LoRA matmuls, the lm_head (forward, and its
input gradient), and causal attention (2 matmuls, x3 for forward+backward, halved for causality, windowed
for sliding layers) - divided by the chip's dense bf16 peak (H200 SXM: 989 TFLOP/s).
"""
import argparse
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import checkpoint  # noqa: E402
import grpo  # noqa: E402
import lora  # noqa: E402
import model as M  # noqa: E402
import parallel as P  # noqa: E402
from recipe import SHARED, loss_settings  # noqa: E402

LFM3_1_7B = dict(model_type="lfm3", vocab_size=128000, hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
                 num_key_value_heads=4, head_dim=128, intermediate_size=7680, sliding_window=256, conv_L_cache=7)


def step_flops(model, seqs, rank):
    cfg = model.config
    n_linear = sum(p.numel() for n, p in model.named_parameters() if n.endswith(".weight") and p.dim() == 2
                   and "embed_tokens" not in n and "lm_head" not in n and ".lora_" not in n)
    n_lora = sum(p.numel() for n, p in model.named_parameters() if ".lora_" in n)
    T = sum(len(s) - 1 for s in seqs)
    f = 4 * n_linear * T + 6 * n_lora * T + 4 * cfg.vocab_size * cfg.hidden_size * T
    h, D = cfg.num_attention_heads, cfg.head_dim
    for lt in cfg.layer_types:
        if lt == "conv":
            continue
        for s in seqs:
            n = len(s) - 1
            keys = n * (n + 1) / 2 if lt == "full_attention" else n * min(cfg.sliding_window, n)
            f += 3 * 2 * 2 * h * D * keys
    return f


def build(cfg, dev, rank, mode=None):
    """Random bf16 weights (seeded: the same on every rank), a rank-`rank` LoRA, wrapped for `mode`."""
    torch.manual_seed(0)
    with dev:
        model = M.CausalLM(cfg)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.ones_like(p) if n.endswith("norm.weight") else torch.randn_like(p) * 0.02)
    model.to(torch.bfloat16).requires_grad_(False).eval()
    lora.add_lora(model, rank=rank, alpha=rank, adapters=("pi",), seed=0)
    lora.set_adapter(model, "pi")
    for p in lora.lora_parameters(model, "pi"):
        p.requires_grad_(True)
    net = P.wrap(model, mode) if mode else model
    params = lora.lora_parameters(model, "pi")          # after wrapping: FSDP2's shards
    return net, params, torch.optim.AdamW(params, lr=1e-5)


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=int, default=65536)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--median", type=int, default=6000, help="median sequence length of the mix")
    ap.add_argument("--prompt", type=int, default=3000, help="tokens of prompt a group of 8 shares (pi's system "
                    "prompt + task: packed once, the 8 rollouts as branches); 0: independent sequences")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--attention", default="sdpa", help="sdpa, flex or sdpa,flex: the training attention rows "
                    "(flex_attention compiles on its first step: minutes on an H200; default: %(default)s)")
    ap.add_argument("--smoke", action="store_true", help="a tiny shape on the CPU, to check the script runs")
    ap.add_argument("--parallel", action="store_true", help="under torchrun: DDP and FSDP2 rows (see above)")
    args = ap.parse_args()
    if args.parallel:
        dev = P.init("cpu" if args.smoke else None)[2]
    else:
        dev = torch.device("cpu" if args.smoke else "cuda")
    shape = dict(LFM3_1_7B, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=16, intermediate_size=128, vocab_size=1000) if args.smoke else LFM3_1_7B
    cfg = checkpoint.parse_config(dict(shape))
    rng = random.Random(0)
    seqs = []
    while sum(len(s) for s in seqs) < 2 * args.budget:     # groups of 8 rollouts of one prompt
        prompt = [rng.randrange(cfg.vocab_size) for _ in range(args.prompt)]
        for _ in range(8):
            n = int(min(max(rng.lognormvariate(0, 0.8) * args.median, 500), args.budget // args.micro_batches))
            own = max(200, n - len(prompt))
            seqs.append(grpo.Sequence(prompt + [rng.randrange(cfg.vocab_size) for _ in range(own)],
                                   [0] * (len(prompt) + 200) + [1] * (own - 200), [-1.0] * (len(prompt) + own),
                                   rng.choice([-1.0, 1.0])))
    packed = grpo.pack(seqs, args.budget, args.micro_batches)
    where = f"{torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}, torch {torch.__version__}"
    if args.parallel:
        return parallel(args, cfg, dev, packed, where)
    model, params, opt = build(cfg, dev, args.rank)
    flops = step_flops(model, [s for mb in packed.micro_batches for s in mb.sequences], args.rank)
    n_params = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    print(f"# LFM3-1.7B shape ({n_params / 1e9:.2f} B params, bf16) + LoRA r={args.rank} "
          f"({sum(p.numel() for p in params) / 1e6:.1f} M trainable); step of {packed.tokens} tokens "
          f"(fill {packed.fill:.0%}; {packed.shared_tokens} more shared as groups' prompts) in "
          f"{len(packed.micro_batches)} micro-batches {[mb.num_tokens for mb in packed.micro_batches]}; {where}")
    print(f"{'attention':<11}{'checkpointing':<15}{'step s':>9}{'tokens/s':>11}{'TFLOP/s':>10}{'MFU':>7}"
          f"{'peak GiB':>10}{'vs sdpa':>9}{'first s':>9}")
    base = {}
    kinds = args.attention.split(",")
    if dev.type != "cuda" and "flex" in kinds:
        raise SystemExit("bench/gpu.py: --attention flex needs a GPU (flex_attention has no backward on a CPU)")
    for fused in [k == "flex" for k in kinds]:
        model.fused = fused
        for ckpt in (False, True):
            model.gradient_checkpointing = ckpt
            name = f"{'flex' if fused else 'sdpa':<11}{'on' if ckpt else 'off':<15}"
            try:
                t, first = timed(args.steps, dev, lambda: plain_step(model, opt, params, packed, dev), first=True)
            except Exception as e:      # one row failing (a kernel, memory) leaves the others to run
                print(f"{name}failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
                opt.zero_grad(set_to_none=True)
                torch.cuda.empty_cache() if dev.type == "cuda" else None
                continue
            base.setdefault(ckpt, t)
            tf = flops / t / 1e12
            print(f"{name}{t:>9.2f}{packed.tokens / t:>11.0f}{tf:>10.0f}{tf / args.peak_tflops:>7.1%}{peak(dev):>10.1f}"
                  f"{base[ckpt] / t:>8.2f}x{first:>9.1f}", flush=True)
    if "flex" in kinds and not M._FLEX_FAILED:     # flex compiled with dynamic shapes: new lengths, no recompile
        model.fused, model.gradient_checkpointing = True, True
        other = grpo.pack(sorted(seqs, key=lambda q: len(q.tokens) % 97), args.budget, args.micro_batches)
        sync()
        t = time.perf_counter()
        plain_step(model, opt, params, other, dev)
        sync()
        t = time.perf_counter() - t
        print(f"flex, checkpointing on, micro-batches of new lengths {[mb.num_tokens for mb in other.micro_batches]}: "
              f"{t:.2f} s a step (a recompilation would cost about the first step's time)")
    if M._FLEX_FAILED:
        print(f"flex_attention fell back to SDPA: {M._FLEX_FAILED[0][:300]}")
    print("first s: the first (warm-up) step, compilation included; step s: the median of the steps after it")

def loss_fn(model, packed, dev):
    """parallel.optimizer_step's loss_fn: the forward through `net` (wrapped or not), the loss over the step."""
    def f(net, mb):
        h = net(mb.input_ids.to(dev), mb.position_ids.to(dev), return_hidden=True)
        logp = grpo.token_logprobs(h, model.lm_head.weight, mb.targets.to(dev))
        return grpo.grpo_loss(logp, mb.old_logp.to(dev), mb.advantages.to(dev), mb.mask.to(dev),
                           totals=packed.totals, **loss_settings(SHARED))
    return f


def plain_step(model, opt, params, packed, dev):
    """One process, every micro-batch: what train.py runs without torchrun."""
    model.train()
    opt.zero_grad(set_to_none=True)
    for mb in packed.micro_batches:
        loss, _ = loss_fn(model, packed, dev)(model, mb)
        loss.backward()
        del loss
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


def peak(dev):
    return (torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0) / 2**30


def timed(steps, dev, step, across=True, first=False):
    """Median seconds of `steps` calls of step() after one warm-up (first=True: and the warm-up's own seconds);
    across ranks: the slowest rank's."""
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(steps + 1):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    t = torch.tensor(sorted(times[1:])[len(times[1:]) // 2])
    if across and P.world() > 1:
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return (t.item(), times[0]) if first else t.item()

def parallel(args, cfg, dev, packed, where):
    """Rank 0 alone (one process's step), then DDP and FSDP2 over every rank of this torchrun: one row each."""
    rank, world = torch.distributed.get_rank() if P.world() > 1 else 0, P.world()
    if rank == 0:
        print(f"# LFM3-1.7B shape, LoRA r={args.rank}, step of {packed.tokens} tokens in {len(packed.micro_batches)} "
              f"micro-batches, {world} ranks; {where}")
    rows = []
    for mode in (None, "ddp", "fsdp"):
        if mode is not None or rank == 0:
            net, params, opt = build(cfg, dev, args.rank, mode)
            model = getattr(net, "module", net)
            if mode is None:
                t = timed(args.steps, dev, lambda: plain_step(net, opt, params, packed, dev), across=False)
            else:
                t = timed(args.steps, dev, lambda: P.optimizer_step(net, opt, params, packed.micro_batches,
                                                               loss_fn(model, packed, dev), 1.0))
            rows.append((mode or "one process", 1 if mode is None else world, t, peak(dev)))
            del net, params, opt, model
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        if world > 1:
            torch.distributed.barrier()
    if rank == 0:
        print(f"{'mode':<13}{'ranks':>6}{'step s':>9}{'tokens/s':>11}{'speed-up':>10}{'peak GiB':>10}")
        for name, n, t, mem in rows:
            print(f"{name:<13}{n:>6}{t:>9.2f}{packed.tokens / t:>11.0f}{rows[0][2] / t:>9.2f}x{mem:>10.1f}")
    P.close()        # leave together: a rank exiting while the other still talks to it makes gloo abort
    P.end()          # ...and gloo's worker threads can still abort the interpreter's teardown


if __name__ == "__main__":
    main()
