"""LoRA forward+backward: tokens/s and peak memory, ours (model.py + lora.py) vs PEFT + transformers.

    python bench/lora.py                        # CPU default: a scaled-down LFM3 shape, rank 32
    python bench/lora.py --preset lfm3-1.7b --device cuda --dtype bf16 --seq 16384

Same base weights and the same rank-32 adapter on every target layer in both (PEFT on transformers'
model with our target list; B randomised so the LoRA path is not trivially zero). A step is one forward
+ backward of a cross-entropy loss over one row of `--seq` tokens; only LoRA weights take gradients.
A third row times ours as train.py uses it: final hidden states + grpo.token_logprobs (the same loss value,
without a [tokens x vocab] logits tensor). Each implementation runs in its own child process, so its peak memory is its own: on CPU the peak
resident set growth during the steps (VmHWM after clearing, minus the resident set before), on CUDA
torch's max_memory_allocated minus the memory held before the first step.
`--profile` adds one profiled step per implementation: seconds per op category (matmul, attention,
log-softmax, conv, the rest) side by side, and the ceiling on the speed-up with identical matmul work.
"""
import argparse
import importlib.util
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from families import FAMILIES  # noqa: E402
_spec = importlib.util.spec_from_file_location("bench_model", ROOT / "bench" / "model.py")
bench_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_model)
PRESETS = bench_model.PRESETS     # the same shapes as bench/model.py


def rss_kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child(impl, ckpt, args, q):
    import checkpoint
    import lora

    torch.set_num_threads(args.threads or torch.get_num_threads())
    dev, dtype = torch.device(args.device), {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    targets = list(FAMILIES["lfm3"].lora_targets)
    if impl.startswith("ours"):
        m = checkpoint.load_model(ckpt, dtype=dtype, device=dev)
        lora.add_lora(m, rank=args.rank, alpha=args.rank, seed=0)
        lora.set_adapter(m, "default")
        if args.grad_ckpt:
            m.gradient_checkpointing = True
    else:
        import peft
        import transformers
        ref = transformers.AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype, attn_implementation="sdpa").to(dev)
        m = peft.get_peft_model(ref, peft.LoraConfig(r=args.rank, lora_alpha=args.rank, target_modules=targets,
                                                     lora_dropout=0.0))
        if args.grad_ckpt:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            m.enable_input_require_grads()
    named = [(n, p) for n, p in m.named_parameters() if ".lora_A." in n or ".lora_B." in n]
    params = [p for _, p in named]
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for n, p in named:
            p.requires_grad_(True)
            if ".lora_B." in n:      # B = 0 would make the LoRA path trivially zero
                p.copy_(0.01 * torch.randn(p.shape, generator=g))
    m.train()
    gen = torch.Generator().manual_seed(0)
    V = checkpoint.read_config(ckpt).vocab_size
    ids = torch.randint(0, V, (1, args.seq), generator=gen).to(dev)
    tgt = torch.randint(0, V, (args.seq,), generator=gen).to(dev)

    def step():
        if impl == "ours, training path":     # what train.py runs: hidden states + fused chunked log-probs
            import grpo
            h = m(ids, return_hidden=True)
            (-grpo.token_logprobs(h, m.lm_head.weight, tgt[None]).mean()).backward()
        else:
            out = m(ids)
            logits = out.logits if hasattr(out, "logits") else out
            torch.nn.functional.cross_entropy(logits[0].float(), tgt).backward()
        for p in params:
            p.grad = None
        if dev.type == "cuda":
            torch.cuda.synchronize()

    if dev.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        before, exact = rss_kib("VmRSS:") * 1024, reset_peak()
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - before
    else:
        peak = rss_kib("VmHWM:") * 1024 - before if exact else float("nan")
    split = profile_step(step, dev) if args.profile else None
    q.put({"impl": impl, "step": statistics.median(times), "peak": peak / 2**30, "split": split})


CATEGORIES = (   # first match wins; op names as torch.profiler reports them
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul")),
    ("attention", ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")),
    ("loss (log-softmax)", ("log_softmax", "nll_loss")),
    ("conv1d", ("convolution",)),
)


def profile_step(step, dev):
    """Seconds of one step per op category (self time of each aten op, so nothing is counted twice)."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        step()
    out = {}
    for e in prof.key_averages():
        if not e.key.startswith("aten::"):
            continue
        t = (e.self_device_time_total if dev.type == "cuda" else e.self_cpu_time_total) / 1e6
        cat = next((c for c, keys in CATEGORIES if any(k in e.key for k in keys)), "elementwise, copies, other")
        out[cat] = out.get(cat, 0.0) + t
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu", choices=PRESETS)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--grad-ckpt", action="store_true")
    ap.add_argument("--rounds", type=int, default=3, help="alternate the implementations this many times")
    ap.add_argument("--profile", action="store_true", help="also profile one step of each: where the time goes")
    args = ap.parse_args()
    import transformers

    p = PRESETS[args.preset]
    L_ = p["num_hidden_layers"]
    layer_types = ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0 else "conv"
                   for i in range(L_)]
    cfg = transformers.Lfm3Config(**p, pad_token_id=0, bos_token_id=1, eos_token_id=2, layer_types=layer_types)
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as ckpt:
        torch.manual_seed(0)
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
        transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype).save_pretrained(ckpt)
        results = {}
        for _ in range(args.rounds):       # alternate, so drift in machine load hits both alike
            for impl in ("peft+transformers", "ours", "ours, training path"):
                q = ctx.Queue()
                proc = ctx.Process(target=child, args=(impl, ckpt, args, q))
                proc.start()
                r = q.get()
                proc.join()
                results.setdefault(impl, []).append(r)
    print(f"# LoRA r={args.rank} on {', '.join(FAMILIES['lfm3'].lora_targets)}; LFM3-shaped {args.preset}: "
          f"hidden {p['hidden_size']}, {L_} layers, vocab {p['vocab_size']}, seq {args.seq}, {args.dtype} on "
          f"{args.device}{', grad-ckpt' if args.grad_ckpt else ''}; torch {torch.__version__}, transformers "
          f"{transformers.__version__}, peft {__import__('peft').__version__}")
    base = min(r["step"] for r in results["peft+transformers"])
    base_mem = min(r["peak"] for r in results["peft+transformers"])
    print(f"{'impl':<20}{'step s':>9}{'tokens/s':>10}{'speed vs PEFT':>15}{'peak GiB':>10}{'memory vs PEFT':>16}")
    for impl, rs in results.items():
        t, mem = min(r["step"] for r in rs), min(r["peak"] for r in rs)
        print(f"{impl:<20}{t:>9.3f}{args.seq / t:>10.0f}{base / t:>14.2f}x{mem:>10.2f}{mem / base_mem:>15.2f}x")
    if args.profile:
        print_split(results)


def print_split(results):
    """Where one step's time goes, per implementation (the last round's profile), side by side."""
    splits = {impl: rs[-1]["split"] for impl, rs in results.items()}
    cats = [c for c, _ in CATEGORIES] + ["elementwise, copies, other"]
    print(f"\n# where the time goes (profiled step, seconds of op self-time){'':<4}" +
          "".join(f"{impl:>22}" for impl in splits))
    for c in cats + ["total"]:
        row = {impl: (sum(sp.values()) if c == "total" else sp.get(c, 0.0)) for impl, sp in splits.items()}
        print(f"{c:<62}" + "".join(f"{v:>22.3f}" for v in row.values()))
    ref = sum(splits["peft+transformers"].values())
    for impl, sp in splits.items():
        if impl != "peft+transformers":
            floor = sp.get("matmul", 0.0) + sp.get("attention", 0.0)
            print(f"ceiling for {impl}: PEFT's total / its own matmul + attention time = {ref / floor:.2f}x "
                  f"(the speed-up if every other op took no time)")


if __name__ == "__main__":
    main()
