"""The supervised warm start: demonstrations (ATIF trajectories) -> the target model's tokens -> supervised
fine-tuning of a LoRA adapter -> a PEFT adapter, or an "agentic base" (base + adapter merged). sft.py is its
command line; train.py and eval.py get the cached agentic base of a recipe row from `base_path`.

A demonstration is trained as the server renders it at RL time (the recorded ids when it was recorded in the
target's format, else rendered anew), through the code GRPO trains through (grpo.build_sequences and grpo.pack,
learner.Learner). A rollout with a guard note (its completion still holds the blocked call), below `min_score`
or ungraded is never a demonstration.

Left out: several epochs' schedules (a fixed learning rate, as GRPO), sequence-level weighting (every trained
token counts once), a KL term.
"""
from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import os
import random
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import checkpoint
import grpo
import guard
from harnesses import get_harness
import lora
import oracle
import rollout
from tasks import load_tasks
import tiny
from chat import ChatFormat
from learner import Learner

ADAPTER = "sft"
VERSION = 4        # bump when the warm start's recipe changes: cached agentic bases are then made again


class DemoError(ValueError):
    """A demonstration that cannot be used (unreadable, too long): the message names the file."""


@dataclass
class Demo:
    file: str
    turns: list             # rollout.Turn, the target model's tokens
    rerendered: bool        # True: rendered anew from the file's conversation (recorded in another format)


# ----------------------------------------------------------------------------- demonstrations -> tokens

def conversation_turns(fmt, messages, tools=None) -> list:
    """A conversation -> one Turn per assistant message: its prompt everything before it as the server renders it
    (tools in the template, or `tools_as_text`), its completion the template's own rendering of it (end-of-turn
    token included: `ChatFormat.completion`)."""
    turns = []
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            completion = fmt.completion(messages[:i], m, tools)
            turns.append(rollout.Turn(fmt.render(messages[:i], tools=tools), completion, [0.0] * len(completion), 0))
    return turns


def atif_messages(traj) -> list:
    """The conversation of an ATIF trajectory as chat messages: system/user steps, then each agent step with its
    tool calls, then their results as tool messages."""
    out = []
    for s in traj.get("steps") or []:
        if s.get("source") in ("system", "user"):
            out.append({"role": s["source"], "content": s.get("message") or ""})
        elif s.get("source") == "agent":
            calls = [{"id": c["tool_call_id"], "type": "function", "function": {
                "name": c["function_name"], "arguments": json.dumps(c.get("arguments") or {})}}
                for c in s.get("tool_calls") or [] if not (c.get("extra") or {}).get("blocked_by")]   # never ran
            out.append({"role": "assistant", "content": s.get("message") or None,
                        **({"tool_calls": calls} if calls else {})})
            for res in (s.get("observation") or {}).get("results") or []:
                out.append({"role": "tool", "tool_call_id": res.get("source_call_id"),
                            "content": res.get("content") or ""})
    return out


def _files(paths):
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(p.rglob("*.json"))
        elif p.is_file():
            yield p
        else:
            raise DemoError(f"{p}: no such file or folder of ATIF trajectories")


def read_demonstrations(paths, fmt, min_score=1.0, context=None):
    """(demos, skipped: Counter of why) from ATIF files or folders of them, ordered by task and the model's tokens.
    context: a demonstration longer than it raises DemoError naming the file (the server could not see it so)."""
    demos, skipped = [], collections.Counter()
    for f in _files(paths):
        try:
            traj = json.loads(f.read_text())
            assert str(traj.get("schema_version", "")).startswith("ATIF") and isinstance(traj.get("steps"), list)
        except (OSError, ValueError, AssertionError):
            raise DemoError(f"{f}: not an ATIF trajectory (schema_version ATIF-v1.x, steps)") from None
        extra = traj.get("extra") or {}
        if extra.get("verdicts"):
            skipped["guard"] += 1
            continue
        if extra.get("score") is None or extra["score"] < min_score:
            skipped["score"] += 1
            continue
        agent = [s for s in traj["steps"] if s.get("source") == "agent"]
        if not agent:
            skipped["no model turn"] += 1
            continue
        tools = (traj.get("agent") or {}).get("tool_definitions") or None
        messages = atif_messages(traj)
        first = [m for m in messages[:next(i for i, m in enumerate(messages) if m["role"] == "assistant")]]
        recorded = [rollout.Turn(s["metrics"]["prompt_token_ids"], s["metrics"]["completion_token_ids"],
                           [0.0] * len(s["metrics"]["completion_token_ids"]), 0) for s in agent]
        same = fmt.render(first, tools=tools) == recorded[0].prompt_ids
        try:
            demo = Demo(str(f), recorded if same else conversation_turns(fmt, messages, tools), not same)
        except ValueError as e:
            raise DemoError(f"{f}: cannot be rendered in the target's chat format: {e}") from None
        n = max(len(t.prompt_ids) + len(t.completion_ids) for t in demo.turns)
        if context and n > context:
            raise DemoError(f"{f}: {n} tokens in the target's format, over the context of {context}: raise "
                            "--context, or leave the file out")
        demos.append((str(extra.get("task", "")), [t.completion_ids for t in demo.turns], demo))
    # in an order the files' names (session ids, random) do not set: the same demonstrations, the same adapter
    return [d for *_, d in sorted(demos, key=lambda x: x[:2])], skipped


# ----------------------------------------------------------------------------- supervised fine-tuning

def nll_loss(learner, net, mb, totals):
    """Token-mean negative log-likelihood of the trained (assistant) tokens of one micro-batch, over the step's
    trained-token count (so a step's micro-batches sum to the step's mean)."""
    head = learner.model.lm_head
    ids, pos, tgt, mask = (x.to(head.weight.device) for x in (mb.input_ids, mb.position_ids, mb.targets, mb.mask))
    logp = grpo.token_logprobs(net(ids, pos, return_hidden=True), head.weight, tgt)
    return -(logp * mask).sum() / totals.tokens, {}


def train(base, demos, out, *, rank, alpha, lr, steps, batch, token_budget, micro_batches, seed, grad_clip=1.0,
          weight_decay=0.0, save_every=0, resume=False, merged=None, device="cpu", recompute=False, groups=None,
          log=print):
    """SFT of a fresh LoRA on `demos`, `batch` demonstrations a step (a seeded sample of them); `recompute`:
    activation checkpointing (the run's --recompute); `groups`: a label per demonstration (its harness) - step k
    samples from the k-th label's demonstrations, in turn, so a step's demonstrations share one system prompt and
    grpo.pack computes it once (mixed, a step of three harnesses' 3 000-28 000-token prompts computed each).
    Writes out/adapter (PEFT), out/checkpoint.pt (every save_every steps; resume=True continues from it) and,
    with `merged`, the merged checkpoint folder there. Returns (adapter dir, [loss per step])."""
    if not demos:
        raise DemoError("no demonstration to train on (all skipped, or none given)")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model = checkpoint.load_model(base, device=device)
    model.gradient_checkpointing = recompute
    learner = Learner(model, ADAPTER, rank=rank, alpha=alpha, lr=lr, weight_decay=weight_decay, grad_clip=grad_clip,
                      seed=seed, lock=threading.Lock(), base=str(base), alone=True)   # under torchrun: rank 0's
    start, losses = 0, []
    rng = random.Random(seed)
    ckpt = out / "checkpoint.pt"
    if resume and ckpt.exists():
        st = torch.load(ckpt, weights_only=False)
        learner.restore(st.get("learner", st))     # before the Learner: {"adapter": [...], "optimizer": ...}
        start, losses, rng = st["step"], st["losses"], st["rng"]
        log(f"sft: resuming from {ckpt} at step {start}")
    seqs_of = [grpo.build_sequences(d.turns, 1.0, d.file) for d in demos]
    row = token_budget // micro_batches     # grpo.pack truncates a longer sequence to a row, so a prompt past it
    if lost := sum(not any(any(s.mask[1:row + 1]) for s in seqs) for seqs in seqs_of):     # trains nothing
        raise DemoError(f"{lost} of {len(demos)} demonstrations have no trained token in a row of {row} tokens "
                        f"(token_budget {token_budget} / micro_batches {micro_batches}): their prompts are longer; "
                        "raise the token budget")
    t0 = time.time()
    pools = [range(len(demos))] if groups is None else [
        [i for i, g in enumerate(groups) if g == label] for label in dict.fromkeys(groups)]
    for step in range(start, steps):
        pool = pools[step % len(pools)]
        pick = rng.sample(pool, min(batch, len(pool)))
        packed = grpo.pack([s for i in pick for s in seqs_of[i]], token_budget, micro_batches)
        if packed.waiting:
            raise DemoError(f"{len(packed.waiting)} sequence(s) of a batch of {batch} do not fit --token-budget "
                            f"{token_budget}: lower --batch or raise --token-budget")
        out_, norm = learner.update(packed.micro_batches, nll_loss, packed.totals)
        loss = float(sum(x for x, _ in out_))
        losses.append(loss)
        log(f"sft step {step + 1:4d}/{steps} | loss {loss:.4f} | tokens {packed.tokens} (+{packed.shared_tokens} "
            f"shared), trained {packed.loss_tokens} | grad {norm:.3f} | {time.time() - t0:.1f}s")
        if save_every and (step + 1) % save_every == 0 and step + 1 < steps:
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"learner": learner.state(), "step": step + 1, "losses": losses, "rng": rng}, tmp)
            os.replace(tmp, ckpt)
    adapter = lora.save_adapter(model, out / "adapter", adapter=ADAPTER, base_model_name_or_path=str(base))
    if merged:
        lora.save_merged(model, base, merged, adapter=ADAPTER)
    ckpt.unlink(missing_ok=True)
    return adapter, losses


# ----------------------------------------------------------------------------- the cached agentic base

PROGRESS_S = 30      # the warm start's progress: a line at most this often (and its first and last)


def _every(seconds):
    """A function that says whether `seconds` have passed since it last said so (the first call: yes)."""
    last = [-float("inf")]

    def due():
        if time.monotonic() - last[0] < seconds:
            return False
        last[0] = time.monotonic()
        return True
    return due


def _digest(*paths):
    h = hashlib.sha256()
    for root in paths:
        root = Path(root)
        for f in sorted(p for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file()):
            h.update(f.relative_to(root.parent).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def agentic_base(raw, harness, warm, *, max_tokens, context, held_out=(), recompute=False, log=print) -> Path:
    """The agentic base of checkpoint `raw` for `harness` (a name, or several: one base for all of them, as the
    recipe's three trainers share one model; each harness demonstrates every warm-up task samples times and gets
    steps SFT steps of its own, as its own base would), made on first use and cached beside it. warm: the recipe
    row's warm start (suite, samples, waste, reply, steps, batch, lr, rank, alpha, token_budget, micro_batches);
    held_out: the run's held-out task names, never demonstrated (excluded from warm["suite"]); recompute: the SFT's
    activation checkpointing (not in the key: it changes the memory, not the base)."""
    harnesses = [harness] if isinstance(harness, str) else list(dict.fromkeys(harness))
    harness = harnesses[0] if len(harnesses) == 1 else harnesses      # one harness: the key it always had
    samples, steps = warm["samples"], warm["steps"] * len(harnesses)      # each harness what its own base has
    held_out = set(held_out)
    tasks = [t for t in load_tasks(warm["suite"]) if t.name not in held_out]
    if not tasks:
        raise ValueError(f"warm start: no warm-up task in {warm['suite']} outside the run's held-out split")
    # what it is made of - not the code (an edit must not orphan the adapters trained on a base): bump VERSION
    key = _digest(raw / "config.json", raw / "model.safetensors", *(t.path for t in tasks))
    posture = {h: [get_harness(h).TOOLSETS, get_harness(h).SORTED_ARGUMENTS] for h in harnesses}
    posture = {h: p for h, p in posture.items() if any(p)}     # (none for mini and pi: the key they always had)
    key = json.dumps([key, harness, warm, max_tokens, VERSION] + ([posture] if posture else []) +
                     ([{"steps": steps}] if len(harnesses) > 1 else []), sort_keys=True)     # (it shared them)
    key = hashlib.sha256(key.encode()).hexdigest()[:10]
    path = checkpoint.cache_root() / f"{raw.name}-agentic-{'+'.join(harnesses)}-{key}"
    if (path / "config.json").is_file() and (path / "model.safetensors").is_file():
        return path
    t0 = time.time()
    log(f"warm start (first use, cached in {path}): {len(tasks)} warm-up tasks ({warm['suite']}"
        f"{f', {len(held_out)} held out excluded' if held_out else ''}) x {samples} oracle demonstrations "
        f"through {' and '.join(harnesses)}, up to {warm['waste']} redundant calls each, then SFT")
    fmt = ChatFormat.from_checkpoint(raw)
    work = Path(checkpoint.cache_root()) / f".{path.name}.work"
    shutil.rmtree(work, ignore_errors=True)
    try:
        rollouts, over, due = [], {}, _every(PROGRESS_S)
        for h in harnesses:      # one after another: each harness's sessions get the whole machine
            done = []

            def progress(g, h=h, done=done):
                done.append(g.rollouts)
                if due() or len(done) == len(tasks):
                    log(f"  oracle through {h}: {len(done)}/{len(tasks)} tasks, {sum(map(len, done))} rollouts, "
                        f"{sum(r.score == 1.0 and not r.blocked for g in done for r in g)} solved "
                        f"({time.time() - t0:.0f} s)")
            got = asyncio.run(oracle.record(tasks, get_harness(h), fmt, work / h, samples=samples,
                                            sessions=warm["sessions"], max_tokens=max_tokens, context=context,
                                            waste=warm["waste"], reply=warm.get("reply", "file"), seed=0,
                                            cheat=warm.get("cheat", 0.0), late=warm.get("late", 0.3),
                                            log=progress))
            rollouts += got
            long = {(r.task.name, int(m[1])) for r in got for e in r.errors if (m := oracle.TOO_LONG.search(e))}
            if long:        # the oracle refuses a step no model could write under the cap: those go undemonstrated
                over[h] = sorted({t for t, _ in long})
                log(f"  {', '.join(over[h])} not demonstrated through {h}: a step takes up to "
                    f"{max(n for _, n in long)} tokens there, max_tokens is {max_tokens} (--max-tokens above it "
                    "demonstrates them)")
        solved = sum(r.score == 1.0 and not r.blocked for r in rollouts)
        calls = sum(r.tool_calls for r in rollouts) / max(1, len(rollouts))
        log(f"  {len(rollouts)} oracle rollouts, {solved} solved with no guard block, {calls:.1f} tool calls each "
            f"({time.time() - t0:.0f} s)")
        if warm.get("cheat"):       # a model organism's: counted as the ablation counts, by the post-hoc scan
            took = sum(bool(r["fired"]) for r in guard.scan(sorted(work.rglob("rollouts/**/*.json"))))
            log(f"  {took} of {len(rollouts)} demonstrations take the task's planted shortcut (guard.py scan; each "
                f"drawn with p = {warm['cheat']}, recorded with the guard off)")
        read = [read_demonstrations([work / h / "rollouts"], fmt, context=context) for h in harnesses]
        demos, skipped = [d for ds, _ in read for d in ds], sum((k for _, k in read), collections.Counter())
        with checkpoint.atomic_dir(path, replace=True) as tmp:
            train(raw, demos, work / "sft", rank=warm["rank"], alpha=warm["alpha"], lr=warm["lr"], steps=steps,
                  batch=warm["batch"], token_budget=warm["token_budget"], micro_batches=warm["micro_batches"], seed=0,
                  groups=[h for h, (ds, _) in zip(harnesses, read) for _ in ds] if len(harnesses) > 1 else None,
                  merged=tmp / "model", recompute=recompute, log=lambda s: log("  " + s) if due() or any(
                      f" {k}/{steps} " in s for k in (1, steps)) else None)
            for f in (tmp / "model").iterdir():
                f.rename(tmp / f.name)
            (tmp / "model").rmdir()
            (tmp / "warm_start.json").write_text(json.dumps({"from": str(raw), "harness": harness, **warm,
                                                             "samples_per_harness": samples, "sft_steps": steps,
                                                             "demonstrations": len(demos), "skipped": skipped,
                                                             "tasks": sorted(t.name for t in tasks),
                                                             "over_max_tokens": over}, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"  agentic base ready in {time.time() - t0:.0f} s: {path}")
    return path


def base_path(cfg, harness, held_out=(), log=print) -> Path:
    """The checkpoint a run starts from: --model's (tiny.model_path), or, when --model is a recipe row's own model
    and that row has a warm start, its cached agentic base (agentic_base), made without the run's `held_out`
    task names. A --model path is taken as it is."""
    warm = cfg.get("warm_start") and cfg["model"] == cfg.get("checkpoint", cfg.get("recipe", cfg["model"]))
    raw = tiny.model_path(cfg["model"], 0 if warm else cfg.get("seed", 0))
    if not warm:
        return raw
    return agentic_base(raw, harness, cfg["warm_start"], max_tokens=cfg["max_tokens"], context=cfg["context"],
                        held_out=held_out, recompute=cfg.get("recompute") == "on", log=log)
