"""The memory plan's training numbers (plan.py) against a real step's peak, side by side: one micro-batch's forward,
log-probs and backward (LoRA on, as train.py runs it), each measured in a fresh process.

    python bench/plan.py                  # CPU: the tiny checkpoint's shape and a scaled-down LFM3, recompute off / on
    python bench/plan.py --device cuda    # the same on a GPU (bf16), plus the LFM3-1.7B shape at 16 384 tokens

On the CPU the peak is the process's resident high-water mark over the step, less what it held before (glibc told to
return every block above 64 KiB to the kernel at once, MALLOC_MMAP_THRESHOLD_, so freed tensors leave the count); on
a GPU torch.cuda.max_memory_allocated. The plan's number is its "activations" item (log-prob chunks included;
weights, adapters and their optimizer are held before the step in both). A ratio of 1.00 is the plan exactly; the tests hold the tiny rows
within 15 %.
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import checkpoint  # noqa: E402
import grpo  # noqa: E402
import lora  # noqa: E402
from model import CausalLM  # noqa: E402
import plan  # noqa: E402
import tiny  # noqa: E402

SHAPES = {
    "tiny": None,                       # the tiny checkpoint's own config (tiny.model_path)
    "lfm3-small": dict(vocab_size=8192, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                       num_key_value_heads=2, head_dim=64, intermediate_size=1536, sliding_window=256,
                       layer_types=plan._lfm3_layers(8)),
    "LFM3-1.7B": plan.SHAPES["LFM3-1.7B"][1],
}
CPU_ROWS = [("tiny", 8192, "off"), ("tiny", 32768, "off"), ("tiny", 8192, "on"), ("tiny", 32768, "on"),
            ("lfm3-small", 4096, "off"), ("lfm3-small", 4096, "on")]
GPU_ROWS = CPU_ROWS + [("LFM3-1.7B", 16384, "on"), ("LFM3-1.7B", 8192, "off")]


def config_of(shape):
    if SHAPES[shape] is None:
        return checkpoint.read_config(tiny.model_path("tiny"))
    return checkpoint.parse_config(tiny.tiny_config("lfm3", **SHAPES[shape]))


def status(key):
    return next(int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith(key))


def measure(shape, tokens, recompute, device, rank):
    """In this (fresh) process: bytes one step's forward + log-probs + backward adds to what is held before it."""
    config, dev = config_of(shape), torch.device(device)
    dtype = torch.float32 if dev.type == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    with dev:
        model = CausalLM(config).to(dtype)
    for p in model.parameters():
        p.requires_grad_(False)
    lora.add_lora(model, rank=rank, alpha=2 * rank, adapters=("a",), seed=0)
    for p in lora.lora_parameters(model, "a"):
        p.requires_grad_(True)
    lora.set_adapter(model, "a")
    model.train()
    model.gradient_checkpointing = recompute == "on"
    ids = torch.randint(0, config.vocab_size, (1, tokens + 1), device=dev)

    def step(n):
        hidden = model(ids[:, :n], torch.arange(n, device=dev)[None], return_hidden=True)
        grpo.token_logprobs(hidden, model.lm_head.weight, ids[:, 1:n + 1]).sum().backward()

    step(min(tokens, 512))                 # kernels and caches set up outside the measured step
    for p in lora.lora_parameters(model, "a"):
        p.grad = torch.zeros_like(p)       # the gradients' buffers exist before the step, as in training
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step(tokens)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    before = status("VmRSS")
    open("/proc/self/clear_refs", "w").write("5")       # resets VmHWM to the current RSS
    step(tokens)
    return status("VmHWM") - before


def planned(shape, tokens, recompute, device, rank):
    config = config_of(shape)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    return plan.activations(config, tokens, rank, dtype, recompute == "on")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rank", type=int, default=8, help="LoRA rank (the tiny row's 8)")
    ap.add_argument("--rows", help="shape:tokens:recompute,... (default: the CPU or GPU set above)")
    ap.add_argument("--json", action="store_true", help="one JSON line per row (the tests read it)")
    ap.add_argument("--one", help=argparse.SUPPRESS)      # shape:tokens:recompute, measured in this process
    args = ap.parse_args()
    if args.one:
        shape, tokens, recompute = args.one.split(":")
        print(measure(shape, int(tokens), recompute, args.device, args.rank))
        return
    rows = [(s, int(t), r) for s, t, r in (x.split(":") for x in args.rows.split(","))] if args.rows else \
        GPU_ROWS if args.device.startswith("cuda") else CPU_ROWS
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    if not args.json:
        print(f"# one micro-batch's step, LoRA r={args.rank}, {args.device}; peak above what was held before it")
        print(f"{'shape':<12}{'tokens':>8}{'recompute':>10}{'measured MiB':>14}{'plan MiB':>10}{'plan/measured':>15}")
    for shape, tokens, recompute in rows:
        out = subprocess.run([sys.executable, __file__, "--one", f"{shape}:{tokens}:{recompute}", "--device",
                              args.device, "--rank", str(args.rank)], env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"bench/plan.py: {shape} at {tokens} tokens failed:\n{out.stderr[-2000:]}")
        got = int(out.stdout.split()[-1])
        want = planned(shape, tokens, recompute, args.device, args.rank)
        if args.json:
            print(json.dumps(dict(shape=shape, tokens=tokens, recompute=recompute, measured=got, plan=want)))
        else:
            print(f"{shape:<12}{tokens:>8}{recompute:>10}{got / 2**20:>14.0f}{want / 2**20:>10.0f}{want / got:>14.2f}x",
                  flush=True)


if __name__ == "__main__":
    main()
