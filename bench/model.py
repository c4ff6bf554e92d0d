"""Forward+backward tokens/s of model.py vs transformers on the same LFM3-shaped random model, side by side.

    python bench/model.py                       # CPU default: a scaled-down LFM3 shape
    python bench/model.py --preset lfm3-1.7b --device cuda --dtype bf16 --seq 16384

Both models hold the same weights (ours is loaded from the transformers model's save_pretrained
directory). Each step is one forward + backward of a cross-entropy loss over one row of `--seq`
tokens; all parameters take gradients in both; peak GPU memory counts both models' weights. `--packed N` also times our padding-free path with
the row split into N sequences (transformers has no packed path without flash-attn, so that row
prints ours only). Prints median step time and tokens/s per implementation and the ratio.
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import checkpoint  # noqa: E402

PRESETS = {   # LFM3 layer pattern (conv, conv, full, conv, sliding, conv, ...)
    "cpu": dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                intermediate_size=1536, vocab_size=8192, sliding_window=256),
    "lfm3-1.7b": dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=4,
                      head_dim=128, intermediate_size=7680, vocab_size=128000, sliding_window=256),
}


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, steps, warmup, dev):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        sync(dev)
        t = time.perf_counter()
        fn()
        sync(dev)
        times.append(time.perf_counter() - t)
    return statistics.median(times) if times else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu", choices=PRESETS)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--packed", type=int, default=4, help="also time ours on the row split into N sequences")
    ap.add_argument("--attn", default="sdpa", help="transformers attn_implementation")
    ap.add_argument("--grad-ckpt", action="store_true", help="per-layer activation checkpointing in both")
    ap.add_argument("--only", choices=["ours", "transformers"], help="time one implementation (e.g. at lengths "
                    "where the other runs out of memory)")
    args = ap.parse_args()
    import transformers

    dev, dtype = torch.device(args.device), {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    p = PRESETS[args.preset]
    L = p["num_hidden_layers"]
    layer_types = ["full_attention" if i % 4 == 2 else "sliding_attention" if i % 4 == 0 and i > 0 else "conv"
                   for i in range(L)]
    cfg = transformers.Lfm3Config(**p, pad_token_id=0, bos_token_id=1, eos_token_id=2, layer_types=layer_types)
    torch.manual_seed(0)
    with dev:
        ref = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=args.attn, dtype=dtype)
    with tempfile.TemporaryDirectory() as tmp:
        ref.save_pretrained(tmp)
        ours = checkpoint.load_model(tmp, dtype=dtype, device=dev)
    ref.train()
    ours.train().requires_grad_(True)
    if args.grad_ckpt:
        ref.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        ours.gradient_checkpointing = True
    ids = torch.randint(0, p["vocab_size"], (1, args.seq), device=dev)
    tgt = torch.randint(0, p["vocab_size"], (args.seq,), device=dev)

    def step(m, **kw):
        def run():
            logits = m(ids, **kw)
            logits = logits.logits if hasattr(logits, "logits") else logits
            torch.nn.functional.cross_entropy(logits[0].float(), tgt).backward()
            m.zero_grad(set_to_none=True)
        return run

    runs = {"transformers": step(ref), "ours": step(ours)}
    if args.only:
        runs = {args.only: runs[args.only]}
    if args.packed > 1:   # the same row as N sequences, position_ids restarting at 0
        pos = torch.arange(args.seq, device=dev) % (args.seq // args.packed)
        runs[f"ours packed x{args.packed}"] = step(ours, position_ids=pos[None])
    peak = {}
    for k, fn in runs.items():    # warm-up, and each implementation's own peak memory
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        timed(fn, 0, max(1, args.warmup), dev)
        peak[k] = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else float("nan")
    times = {k: [] for k in runs}
    for _ in range(args.steps):      # interleaved, so drift in machine load hits every row alike
        for k, fn in runs.items():
            times[k].append(timed(fn, 1, 0, dev))
    rows = [(k, statistics.median(v)) for k, v in times.items()]
    print(f"# LFM3-shaped {args.preset}: hidden {p['hidden_size']}, {L} layers, vocab {p['vocab_size']}, "
          f"seq {args.seq}{', grad-ckpt' if args.grad_ckpt else ''}, {args.dtype} on {dev}, "
          f"torch {torch.__version__}, transformers {transformers.__version__}")
    base = dict(rows).get("transformers", float("nan"))
    print(f"{'impl':<22}{'step s':>10}{'tokens/s':>12}{'vs transformers':>18}{'peak GiB':>10}")
    for name, t in rows:
        print(f"{name:<22}{t:>10.3f}{args.seq / t:>12.0f}{base / t:>17.2f}x{peak[name]:>10.1f}")


if __name__ == "__main__":
    main()
