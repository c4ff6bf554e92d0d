"""Supervised fine-tuning of a LoRA adapter on agent trajectories (ATIF files): the warm start before GRPO.

    python eval.py --model tiny --oracle --split train --samples 4 --waste 3 --out runs/demos   # record demos
    python sft.py --model tiny --data runs/demos/rollouts/oracle --out runs/sft --merged runs/sft/base
    python train.py --model runs/sft/base --recipe tiny --no-warm-start      # GRPO from that agentic base

Trains on the oracle's or any run's trajectories scoring >= --min-score (never one with a guard note), each in the
target's chat format exactly as the server renders it at RL time, loss on the assistant's tokens only. Writes a PEFT
adapter and, with --merged, base + adapter as a checkpoint folder: an agentic base train.py starts from like any model
(vLLM applies one LoRA per request, so GRPO's adapter could not be stacked on an SFT one). --resume continues a killed
run. The library is warmstart.py; this is its command line.

Left out: torchrun (one process), a learning-rate schedule, evaluation during training (eval.py does that).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import checkpoint
import lora
import tiny
import warmstart
from chat import ChatFormat


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the base: tiny, a checkpoint folder, a .gguf file or a known name "
                                                   "(as train.py's --model; required)")
    ap.add_argument("--data", nargs="+", required=True, help="ATIF files or folders of them (required)")
    ap.add_argument("--out", required=True, help="output folder: adapter/, checkpoint.pt while training (required)")
    ap.add_argument("--merged", help="also write base + adapter merged as a checkpoint folder here (default: no)")
    ap.add_argument("--min-score", type=float, default=1.0, help="only trajectories scoring at least this "
                                                                 "(default: %(default)s, full passes)")
    ap.add_argument("--steps", type=int, default=100, help="optimizer steps (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=8, help="trajectories per step (default: %(default)s)")
    ap.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate (default: %(default)s)")
    ap.add_argument("--rank", type=int, default=16, help="LoRA rank (default: %(default)s)")
    ap.add_argument("--alpha", type=float, default=32, help="LoRA alpha (default: %(default)s)")
    ap.add_argument("--token-budget", type=int, default=65536, help="tokens per step (default: %(default)s)")
    ap.add_argument("--micro-batches", type=int, default=4, help="packed rows per step (default: %(default)s)")
    ap.add_argument("--context", type=int, default=None, help="refuse trajectories longer than this (default: the "
                                                              "model's max_position_embeddings)")
    ap.add_argument("--save-every", type=int, default=20, help="checkpoint every N steps (default: %(default)s)")
    ap.add_argument("--resume", action="store_true", help="continue from --out/checkpoint.pt (default: start anew)")
    ap.add_argument("--seed", type=int, default=0, help="LoRA init and batch order (default: %(default)s)")
    ap.add_argument("--device", default="cpu", help="torch device (default: %(default)s)")
    args = ap.parse_args(argv)
    for k in ("steps", "batch", "rank", "token_budget", "micro_batches", "save_every"):
        if getattr(args, k) < (0 if k == "save_every" else 1):
            ap.error(f"--{k.replace('_', '-')} must be >= {0 if k == 'save_every' else 1}, got {getattr(args, k)}")
    for k in ("lr", "alpha"):
        if not getattr(args, k) > 0:         # NaN fails this too
            ap.error(f"--{k} must be a number > 0, got {getattr(args, k)}")
    if args.resume and not (Path(args.out) / "checkpoint.pt").exists():
        ap.error(f"--resume: {Path(args.out) / 'checkpoint.pt'} does not exist")
    try:
        path = tiny.model_path(args.model)
        fmt = ChatFormat.from_checkpoint(path)
        context = args.context or int(checkpoint.read_config(path).raw.get("max_position_embeddings", 4096))
        demos, skipped = warmstart.read_demonstrations(args.data, fmt, args.min_score, context)
        print(f"sft: {len(demos)} demonstrations from {', '.join(args.data)}" +
              (f" ({sum(d.rerendered for d in demos)} rendered anew in {args.model}'s format)" if any(
                  d.rerendered for d in demos) else "") +
              (f"; skipped {', '.join(f'{n} ({why})' for why, n in skipped.items())}" if skipped else ""), flush=True)
        adapter, losses = warmstart.train(path, demos, args.out, rank=args.rank, alpha=args.alpha, lr=args.lr,
                                  steps=args.steps, batch=args.batch, token_budget=args.token_budget,
                                  micro_batches=args.micro_batches, seed=args.seed, save_every=args.save_every,
                                  resume=args.resume, merged=args.merged, device=args.device,
                                  log=lambda s: print(s, flush=True))
    except (warmstart.DemoError, checkpoint.CheckpointError, lora.AdapterError, FileNotFoundError) as e:
        sys.exit(f"sft.py: {e}")
    print(f"sft: loss {losses[0]:.4f} -> {losses[-1]:.4f}; adapter {adapter}" +
          (f"; agentic base {args.merged} (train.py --model {args.merged})" if args.merged else ""))


if __name__ == "__main__":
    main()
