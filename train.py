"""Train LoRA adapters with GRPO inside real coding-agent harnesses: the whole recipe, end to end.

    python train.py --model tiny                               # CPU demo: tiny checkpoint, toy tasks, mini
    python train.py --model LFM3-1.7B --harness pi             # the recipe, on GPUs with vLLM
    python train.py --model LFM3-1.7B --harness pi,opencode,hermes --server vllm
    python train.py --resume runs/<name>                       # continue a stopped or killed run

One process, one frozen base model, one adapter + optimizer + rollout pool + guard proxy per harness, one
inference server for all of them (embedded, vLLM, or a URL). Per harness, a step: take the groups whose 8
rollouts are all graded -> shaped rewards -> group advantages -> turns merged into sequences -> drop
rollouts begun more than 4 versions ago -> pack into 4 micro-batches under the token budget -> loss,
backward, AdamW -> save adapter v(N+1) -> the server loads it as `<harness>-v(N+1)`, new requests use it,
versions older than the staleness window are unloaded. Pools keep sessions running meanwhile.

Every recipe number is in RECIPES / SHARED below and can be overridden from the command line
(`--steps 50 --lr 2e-5 ...`); the effective config is saved as runs/<name>/config.json. Checkpoints
(adapters, optimizers, step, RNG, data cursor) are written atomically every `--save-every` steps and at
exit; `--resume` continues from the last one. Ctrl-C stops cleanly (finishes the step, checkpoints).

Left out: multi-node training; FSDP sharding (`torchrun` + FSDP2 wraps model.py from outside); a learning
rate schedule (the recipe gives none).
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import random
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import torch

import grpo as G
import harnesses as H
import lora as L
import model as M
import rollout as R
import serve as S
import tasks as T

# ----------------------------------------------------------------------------- the recipe, in one table
SHARED = dict(
    rank=32, alpha=32,                  # LoRA rank 32 on every linear layer
    group_size=8,                       # rollouts per task (GRPO group)
    lr=1e-5, weight_decay=0.0, grad_clip=1.0,
    micro_batches=4,                    # a step = at most 4 packed micro-batches
    max_staleness=4,                    # drop rollouts begun more than 4 adapter versions ago
    bonus=0.1, bonus_scale=15,          # reward = score + 0.1 * (1 - tool_calls / 15) on full passes
    eps_low=0.2, eps_high=0.28, beta=0.0, ratio_cap=None,
    temperature=1.0, top_p=1.0, max_tokens=4096, context=131072,
    save_every=10, seed=0, harness="pi", suite="all", server="vllm",
)
RECIPES = {
    "LFM3-1.7B": dict(steps=400, sessions=48, token_budget=65536, gpus=2, server="local"),  # vLLM 0.33: no LFM3
    "LFM2.5-24B-A2B": dict(steps=200, sessions=48, token_budget=131072, gpus=4),
    "TwIL-8B": dict(steps=300, sessions=12, token_budget=65536, gpus=4),     # long reasoning fills memory
    # CPU demo: a tiny random checkpoint (written on first use), the toy suite, the built-in mini harness
    "tiny": dict(steps=16, sessions=32, token_budget=16384, gpus=0, lr=1e-2, rank=8, alpha=16, harness="mini",
                 suite="toy", server="local", max_tokens=24, context=4096, save_every=4),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help=f"one of {', '.join(RECIPES)}, a HF repo id or a checkpoint directory")
    ap.add_argument("--recipe", help="recipe row to use for a --model given as a path (default: tiny / LFM3-1.7B)")
    ap.add_argument("--harness", help="pi, opencode, hermes, mini - or several, comma-separated (NAME:LABEL "
                                      "for a second trainer in the same harness)")
    ap.add_argument("--server", help="local (embedded), vllm, or the URL of a running server")
    ap.add_argument("--run", help="run name (directory under --runs)")
    ap.add_argument("--runs", default="runs")
    ap.add_argument("--resume", metavar="RUN_DIR", help="continue this run from its last checkpoint")
    ap.add_argument("--sandbox", default="dir", choices=["dir", "bwrap"])
    ap.add_argument("--keep-sandboxes", action="store_true")
    ap.add_argument("--device")
    for k, v in {**SHARED, **RECIPES["LFM3-1.7B"]}.items():
        if k not in ("harness", "server"):
            ap.add_argument("--" + k.replace("_", "-"), type=type(v) if v is not None else float, default=None)
    return ap.parse_args(argv)


def effective_config(args) -> dict:
    if args.resume:
        cfg = json.loads((Path(args.resume) / "config.json").read_text())
        cfg.update({k: v for k, v in vars(args).items() if v is not None and k in ("steps", "save_every")})
        return cfg
    if not args.model:
        raise SystemExit("train.py: --model is required (e.g. --model tiny), or --resume RUN_DIR")
    recipe = args.recipe or (args.model if args.model in RECIPES else "LFM3-1.7B")
    if recipe not in RECIPES:
        raise SystemExit(f"train.py: unknown recipe {recipe!r}; known: {', '.join(RECIPES)}")
    cfg = {**SHARED, **RECIPES[recipe], "model": args.model, "recipe": recipe}
    cfg.update({k: v for k, v in vars(args).items() if v is not None and k not in ("resume", "recipe")})
    cfg["run"] = cfg.get("run") or f"{Path(str(args.model)).name}-{cfg['harness'].replace(',', '+')}-" \
                                    f"{time.strftime('%Y%m%d-%H%M%S')}"
    return cfg


def model_path(cfg, run_dir) -> Path:
    if cfg["model"] == "tiny":
        path = Path(os.environ.get("HARNESS_RL_CACHE", Path.home() / ".cache" / "harness-rl")) / "tiny-lfm3"
        if not (path / "model.safetensors").exists():
            M.write_tiny_checkpoint(path, "lfm3", seed=cfg["seed"])
        return path
    return M.resolve_model(cfg["model"])


# ----------------------------------------------------------------------------- one harness's trainer

class Trainer:
    """One adapter, its optimizer, proxy and pool; its step and version."""

    def __init__(self, spec, model, cfg, run_dir, tasks, client):
        kind, _, label = spec.partition(":")       # "mini:b" = a second mini trainer with its own adapter
        name = f"{kind}-{label}" if label else kind
        self.name, self.model, self.cfg, self.run_dir, self.client = name, model, cfg, run_dir, client
        self.harness = H.get_harness(kind)
        L.add_lora(model, rank=cfg["rank"], alpha=cfg["alpha"], adapters=(name,), seed=cfg["seed"])
        self.params = L.lora_parameters(model, name)
        for p in self.params:
            p.requires_grad_(True)
        self.opt = torch.optim.AdamW(self.params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])
        self.step, self.version, self.cursor = 0, 0, 0
        self.order = list(tasks)
        random.Random(f"{cfg['seed']}/{name}").shuffle(self.order)
        self.queue, self.loaded, self.last_sync = [], [], 0.0

    def next_task(self):
        task = self.order[self.cursor % len(self.order)]
        self.cursor += 1
        return task

    def adapter(self):
        return f"{self.name}-v{self.version}", self.version

    async def publish(self):
        """Save the live adapter as a new version and hot-load it; unload what is out of the window."""
        t0 = time.time()
        path = self.run_dir / "adapters" / f"{self.name}-v{self.version}"
        await asyncio.to_thread(L.save_adapter, self.model, path, self.name, str(self.cfg["model"]))
        await self.client.load_adapter(f"{self.name}-v{self.version}", path.resolve())
        self.loaded.append(self.version)
        while self.loaded and self.loaded[0] < self.version - self.cfg["max_staleness"]:
            await self.client.unload_adapter(f"{self.name}-v{self.loaded.pop(0)}")
        self.last_sync = time.time() - t0

    def train_step(self, packed, record):
        """Forward/backward over the micro-batches, one optimizer step, and the step's commit: step and
        version advance and its metrics line is written under the same lock a checkpoint snapshot takes,
        so a checkpoint never holds updated weights without their step (runs in a worker thread)."""
        cfg, model, dev = self.cfg, self.model, self.model.device
        with TRAIN_LOCK:
            L.set_adapter(model, self.name)
            model.train()
            self.opt.zero_grad(set_to_none=True)
            sums = {}
            for mb in packed.micro_batches:
                t = lambda x: x.to(dev)  # noqa: E731
                h = model(t(mb.input_ids), t(mb.position_ids), return_hidden=True)
                logp = G.token_logprobs(h, model.lm_head.weight, t(mb.targets))
                loss, st = G.grpo_loss(logp, t(mb.old_logp), t(mb.advantages), t(mb.mask),
                                       num_tokens=packed.loss_tokens, eps_low=cfg["eps_low"],
                                       eps_high=cfg["eps_high"], ratio_cap=cfg["ratio_cap"])
                loss.backward()
                w = st["tokens"].item() / max(packed.loss_tokens, 1)
                for k, v in st.items():
                    sums[k] = max(sums.get(k, 0.0), v.item()) if k == "ratio_max" else sums.get(k, 0.0) + (
                        v.item() if k == "tokens" else w * v.item())
                sums["loss"] = sums.get("loss", 0.0) + loss.item()
            sums["grad_norm"] = torch.nn.utils.clip_grad_norm_(self.params, cfg["grad_clip"]).item()
            self.opt.step()
            model.eval()
            self.step += 1
            self.version += 1
            m = {"harness": self.name, "step": self.step, "version": self.version, **record(sums)}
            with open(self.run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(m) + "\n")
        return m

    def state(self):
        return {"step": self.step, "version": self.version, "cursor": self.cursor, "loaded": self.loaded,
                "adapter": {i: p.detach().cpu() for i, p in enumerate(self.params)},
                "optimizer": self.opt.state_dict()}

    def restore(self, st):
        self.step, self.version, self.cursor = st["step"], st["version"], st["cursor"]
        with torch.no_grad():
            for i, p in enumerate(self.params):
                p.copy_(st["adapter"][i])
        self.opt.load_state_dict(st["optimizer"])


TRAIN_LOCK = threading.Lock()       # one forward/backward at a time on the shared base
CHECKPOINT_LOCK = threading.Lock()  # one checkpoint write at a time


async def collect(tr: Trainer, pool: R.RolloutPool, stop: asyncio.Event):
    """Wait for the first finished group, then take more while the step's budget is not filled and
    fewer than sessions / group_size groups are taken (the recipe's ~6 tasks x 8 rollouts)."""
    cfg, groups = tr.cfg, []
    max_groups = max(1, cfg["sessions"] // cfg["group_size"])
    tokens = sum(len(s) for s in tr.queue)
    while len(groups) < max_groups and tokens < cfg["token_budget"] and not stop.is_set():
        get = asyncio.ensure_future(pool.groups.get())
        done, _ = await asyncio.wait({get, asyncio.ensure_future(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
        if get not in done:
            get.cancel()
            break
        g = get.result()
        groups.append(g)
        tokens += sum(len(t.prompt_ids) + len(t.completion_ids) for r in g.rollouts for t in r.turns)
    return groups


def step_inputs(tr: Trainer, groups):
    """Groups -> sequences (FIFO after what waited), the stale ones dropped; and the step's statistics."""
    cfg, seqs, st = tr.cfg, [], {"groups": len(groups), "no_signal": 0}
    rollouts = [r for g in groups for r in g.rollouts]
    graded = [r for r in rollouts if r.score is not None]
    for g in groups:
        rewards = [G.shaped_reward(r.score, r.tool_calls, r.flagged, cfg["bonus"], cfg["bonus_scale"])
                   for r in g.rollouts]
        adv, signal_ = G.group_advantages(rewards)
        st["no_signal"] += not signal_
        for r, a in zip(g.rollouts, adv):
            if signal_ and a is not None and r.turns:
                for s in G.build_sequences(r.turns, a, r.id):
                    s.version = r.start_version
                    seqs.append(s)
    kept, stale = G.drop_stale(tr.queue + seqs, tr.version, cfg["max_staleness"])
    st.update(rollouts=len(rollouts), ungraded=len(rollouts) - len(graded),
              reward=_mean([G.shaped_reward(r.score, r.tool_calls, r.flagged) for r in graded]),
              score=_mean([r.score for r in graded]), pass_rate=_mean([float(r.score == 1.0) for r in graded]),
              tool_calls=_mean([r.tool_calls for r in graded]), guard_blocks=sum(r.flagged for r in rollouts),
              dropped_stale=len({s.rollout for s in stale}))
    return kept, st


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


# ----------------------------------------------------------------------------- checkpoints, metrics

def save_checkpoint(run_dir, trainers):
    """Adapters, optimizers, steps, versions, data cursors and RNG, replaced atomically (temp dir + rename).
    The snapshot is taken under TRAIN_LOCK: no optimizer step or step commit happens in between. Saves
    from several trainers' threads are serialised (CHECKPOINT_LOCK): they share the temp dir, and the
    newer snapshot must land last."""
    with CHECKPOINT_LOCK:
        _save_checkpoint(run_dir, trainers)


def _save_checkpoint(run_dir, trainers):
    with TRAIN_LOCK:
        state = copy.deepcopy({"trainers": {t.name: t.state() for t in trainers}, "rng": {
            "torch": torch.get_rng_state(), "python": random.getstate()}})
    tmp, final = run_dir / "checkpoint.tmp", run_dir / "checkpoint"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    torch.save(state, tmp / "state.pt")
    old = run_dir / "checkpoint.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(run_dir, trainers):
    final = run_dir / "checkpoint"
    if not final.exists() and (run_dir / "checkpoint.old").exists():   # killed between the two renames
        os.replace(run_dir / "checkpoint.old", final)
    if not (final / "state.pt").exists():
        return False
    st = torch.load(final / "state.pt", weights_only=False)
    for t in trainers:
        t.restore(st["trainers"][t.name])
    torch.set_rng_state(st["rng"]["torch"])
    random.setstate(st["rng"]["python"])
    return True


def trim_metrics(path, trainers):
    """After a kill: keep only complete lines up to each harness's checkpointed step."""
    if not path.exists():
        return
    last = {t.name: t.step for t in trainers}
    keep = []
    for line in path.read_text().splitlines():
        try:
            m = json.loads(line)
        except json.JSONDecodeError:
            continue
        if m.get("step", 0) <= last.get(m.get("harness"), 0):
            keep.append(line)
    path.write_text("".join(x + "\n" for x in keep))


def progress(m):
    f = lambda v, s="{:.3f}": "-" if v is None else s.format(v)  # noqa: E731
    return (f"[{m['harness']}] step {m['step']:>4} | reward {f(m['reward'])} pass {f(m['pass_rate'], '{:.0%}')} "
            f"| tools {f(m['tool_calls'], '{:.1f}')} blocks {m['guard_blocks']} stale {m['dropped_stale']} "
            f"ungraded {m['ungraded']} | tokens {m['tokens']} fill {m['fill']:.0%} | loss {f(m.get('loss'))} "
            f"clip {f(m.get('clip_frac'), '{:.2f}')} | {m['step_time']:.1f}s (wait {m['wait_time']:.1f} train "
            f"{m['train_time']:.1f} sync {m['sync_time']:.1f}) | in flight {m['in_flight']}")


# ----------------------------------------------------------------------------- the run

async def run(cfg, resume=False):
    run_dir = Path(cfg["runs"]) / cfg["run"] if not resume else Path(cfg["resume_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "resume_dir"},
                                                    indent=2, default=str) + "\n")
    torch.manual_seed(cfg["seed"])
    random.seed(cfg["seed"])
    device = cfg.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    path = model_path(cfg, run_dir)
    model = M.load_model(path, device=device)
    all_tasks = T.load_tasks(cfg["suite"])
    train_tasks = T.load_tasks(cfg["suite"], split="train", seed=cfg["seed"])
    (run_dir / "split.json").write_text(json.dumps(T.split_manifest(all_tasks, seed=cfg["seed"]), indent=1))
    names = [h.strip() for h in cfg["harness"].split(",") if h.strip()]
    for n in names:
        await asyncio.to_thread(H.get_harness(n.partition(":")[0]).install)
    if cfg["server"] == "local":
        handle = S.start_local(path, model=model, name=str(cfg["model"]), max_model_len=cfg["context"])
    else:
        handle = S.start_server(cfg["server"], path, run_dir=run_dir, trainers=len(names),
                                max_staleness=cfg["max_staleness"], rank=cfg["rank"]) \
            if cfg["server"] == "vllm" else S.start_server(cfg["server"], path)
    client = S.Client(handle.url)
    trainers = [Trainer(n, model, cfg, run_dir, train_tasks, client) for n in names]
    if resume and load_checkpoint(run_dir, trainers):
        print(f"resumed {run_dir} at " + ", ".join(f"{t.name} step {t.step}" for t in trainers), flush=True)
    trim_metrics(run_dir / "metrics.jsonl", trainers)
    if not cfg.get("keep_sandboxes"):      # left behind by a killed run: no rollout is running now
        shutil.rmtree(run_dir / "sandboxes", ignore_errors=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    pools, proxies = [], []
    try:
        for t in trainers:
            await t.publish()
            proxy = R.Proxy(client, t.adapter, {"temperature": cfg["temperature"], "top_p": cfg["top_p"],
                                                "max_tokens": cfg["max_tokens"]})
            await proxy.start()
            pool = R.RolloutPool(t.harness, proxy, t.next_task, lambda t=t: t.version, run_dir / "sandboxes" / t.name,
                                 max_sessions=cfg["sessions"], group_size=cfg["group_size"],
                                 rollouts_dir=run_dir / "rollouts" / t.name, keep=cfg.get("keep_sandboxes", False),
                                 sandbox=cfg.get("sandbox", "dir"), max_tokens=cfg["max_tokens"],
                                 context=cfg["context"])
            pool.start()
            proxies.append(proxy)
            pools.append(pool)
        print(f"run {run_dir}: {cfg['model']} on {device}, harness {', '.join(names)}, server {handle.url}, "
              f"{len(train_tasks)} train tasks, {cfg['steps']} steps", flush=True)
        await asyncio.gather(*(loop_one(t, p, cfg, run_dir, stop, trainers) for t, p in zip(trainers, pools)))
    finally:
        await asyncio.to_thread(save_checkpoint, run_dir, trainers)
        for p in pools:
            await p.stop()
        for p in proxies:
            await p.stop()
        await client.close()
        handle.stop()
    summary(run_dir, trainers)


async def loop_one(tr, pool, cfg, run_dir, stop, everyone):
    while tr.step < cfg["steps"] and not stop.is_set():
        t0 = time.time()
        groups = await collect(tr, pool, stop)
        if not groups:
            break
        seqs, st = step_inputs(tr, groups)
        packed = G.pack(seqs, cfg["token_budget"], cfg["micro_batches"])
        tr.queue = packed.waiting
        t1 = time.time()
        if not packed.micro_batches:
            continue                                  # nothing with signal yet: keep collecting

        def record(losses):     # the step's metrics line; sync_time = publishing the version it started from
            t2 = time.time()
            return {**st, "tokens": packed.tokens, "fill": packed.fill, "truncated": packed.truncated,
                    "waiting": len(packed.waiting), **{k: v for k, v in losses.items() if k != "tokens"},
                    "loss_tokens": packed.loss_tokens, "step_time": t2 - t0 + tr.last_sync, "wait_time": t1 - t0,
                    "train_time": t2 - t1, "sync_time": tr.last_sync, "in_flight": pool.running, "time": t2}
        m = await asyncio.to_thread(tr.train_step, packed, record)
        print(progress(m), flush=True)
        await tr.publish()
        if tr.step % cfg["save_every"] == 0:
            await asyncio.to_thread(save_checkpoint, run_dir, everyone)


def summary(run_dir, trainers):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()] \
        if (run_dir / "metrics.jsonl").exists() else []
    print(f"\nrun {run_dir}")
    for t in trainers:
        ms = [m for m in lines if m["harness"] == t.name]
        rs = [m["reward"] for m in ms if m["reward"] is not None]
        k = max(1, len(rs) // 4)
        curve = f"mean reward first {k} steps {sum(rs[:k]) / k:.3f} -> last {k} {sum(rs[-k:]) / k:.3f}" if rs else ""
        print(f"  {t.name}: {t.step} steps, adapter {run_dir / 'adapters' / f'{t.name}-v{t.version}'}; {curve}")
    print(f"  metrics {run_dir / 'metrics.jsonl'}, rollouts {run_dir / 'rollouts'}, checkpoint {run_dir / 'checkpoint'}")


def main(argv=None):
    args = parse_args(argv)
    cfg = effective_config(args)
    if args.resume:
        cfg["resume_dir"] = args.resume
    try:
        asyncio.run(run(cfg, resume=bool(args.resume)))
    except (M.CheckpointError, T.TaskError, RuntimeError, ValueError) as e:
        sys.exit(f"train.py: {e}")


if __name__ == "__main__":
    main()
