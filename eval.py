"""Evaluate the base model and any number of adapters on held-out tasks through ONE server, in one job.

    python train.py --model tiny --run r                  # CPU, ~2-5 min: prints its final adapter, e.g. mini-v23
    python eval.py --model tiny --samples 16 --adapters runs/r/adapters/mini-v23     # CPU, seconds: the toy holdout
    python eval.py --model LFM2.5-24B-A2B --server vllm --adapters runs/y/adapters/pi-v*     # GPU, the recipe's
    python eval.py --model tiny --oracle --harness pi --suite all --split all --waste 3   # the oracle agent
    python eval.py --model tiny --adapters runs/t/adapters/{pi,opencode,hermes}-v{8,16,24}  # 9 adapters, 3 harnesses

The numbers are the model's row in recipe.py's table unless a flag says otherwise. Held out means the run's own:
adapters under runs/<name>/adapters/ are scored on that run's split.json, from the base that run trained on.
Every checkpoint is an adapter name on the same server, so all run as one batch of real harness rollouts (proxy,
guard, verifier). A run's adapter runs in the harness it was trained in (`--harness`: every model in that one), and
the base in each of those harnesses (rows `<model>@<harness>` when there are several), each adapter compared with
the base in its own; each adapter's model card gets its rows (hub.write_eval). Per model, overall and per task
source and type: pass@1 (95 % Wilson interval), mean score (95 % normal interval over rollouts), tool calls, guard
blocks, ungraded by why; result.json and report.html.

Left out: pass@k for k > 1, paired significance tests between adapters, cost accounting.
"""
from __future__ import annotations

import argparse
import asyncio
import html
import json
import math
import sys
import time
from pathlib import Path

import checkpoint
import harborenv
from harnesses import get_harness
import hub
import inference
import lora
import oracle
import rundir
from pool import RolloutPool
from sandbox import SANDBOXES
from suites import eval_only
import servers
from tasks import TaskError, load_tasks, split_manifest
import tiny
import warmstart
from chat import ChatFormat
from flags import validate
from metrics import mean_or_none
from proxy import Proxy
from recipe import HOLDOUT, SHARED, recipe_config, rollout_reward

PROGRESS_EVERY = 30         # seconds between eval's progress lines


def wilson(k, n, z=1.96):
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def mean_interval(xs, z=1.96):
    """(mean, (lo, hi)): the normal 95 % interval of a mean over independent samples (here: rollouts, so it
    covers sampling noise on these tasks, not the spread over other tasks)."""
    if not xs:
        return None, (0.0, 0.0)
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    h = z * sd / math.sqrt(len(xs))
    return m, (m - h, m + h)


def summarize(rollouts):
    graded = [r for r in rollouts if r["score"] is not None]
    k = sum(r["score"] == 1.0 for r in graded)
    score, (lo, hi) = mean_interval([r["score"] for r in graded])
    score_ci = (max(0.0, lo), min(1.0, hi))         # a score is in [0, 1]
    why = {}
    for r in rollouts:
        if r["score"] is None:
            why[r.get("failure") or "other"] = why.get(r.get("failure") or "other", 0) + 1
    return {"n": len(rollouts), "graded": len(graded), "pass@1": k / len(graded) if graded else None,
            "ci95": wilson(k, len(graded)), "score": score, "score_ci95": score_ci,
            "tool_calls": mean_or_none([r["tool_calls"] for r in graded]),
            "tool_calls_solved": mean_or_none([r["tool_calls"] for r in graded if r["score"] == 1.0]),
            "blocked": sum(r["blocked"] for r in rollouts), "ungraded": len(rollouts) - len(graded),
            # graded, scored as the work dir was left: out of the agent timeout, or the harness failed after replies
            "timed_out": sum(bool(r.get("timed_out")) for r in graded),
            "harness_failed": sum(bool(r.get("harness_failed")) for r in graded),
            "ungraded_by": dict(sorted(why.items()))}


def _why(s):
    why = f" ({', '.join(f'{k} {v}' for k, v in s['ungraded_by'].items())})" if s["ungraded_by"] else ""
    left = [f"{s[k]} {w}" for k, w in (("timed_out", "timed out"), ("harness_failed", "harness failed")) if s.get(k)]
    return f"{s['ungraded']}{why}" + (f"; {', '.join(left)}, graded" if left else "")


def table(rep) -> str:
    """The printed summary, one row per model."""
    rows = [("model", "rollouts", "mean score (95% interval)", "pass@1 (95% interval)", "tool calls", "per solved",
             "guard blocks", "ungraded")]
    for m, s in rep["models"].items():
        (lo, hi), (slo, shi) = s["ci95"], s["score_ci95"]
        rows.append((m, str(s["n"]), "-" if s["score"] is None else f"{s['score']:.3f} ({slo:.3f}-{shi:.3f})",
                     "-" if s["pass@1"] is None else f"{s['pass@1']:.0%} ({lo:.0%}-{hi:.0%})",
                     _f(s["tool_calls"]), _f(s["tool_calls_solved"]), str(s["blocked"]), _why(s)))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w[i]) if i in (0, len(r) - 1) else c.rjust(w[i])
                               for i, c in enumerate(r)).rstrip()
                     for r in rows)


def card_table(rep, models, meta) -> str:
    """The evaluation of `models` (base first) as a model card's markdown: what was run, one row each."""
    rows = ["| model | rollouts | pass@1 (95% interval) | mean score (95% interval) | tool calls | per solved |",
            "|---|---|---|---|---|---|"]
    for m in models:
        s = rep["models"][m]
        (lo, hi), (slo, shi) = s["ci95"], s["score_ci95"]
        rows.append(f"| {Path(str(m)).name} | {s['n']} | "
                    + ("-" if s["pass@1"] is None else f"{s['pass@1']:.0%} ({lo:.0%}-{hi:.0%})") + " | "
                    + ("-" if s["score"] is None else f"{s['score']:.3f} ({slo:.3f}-{shi:.3f})")
                    + f" | {_f(s['tool_calls'])} | {_f(s['tool_calls_solved'])} |")
    return (f"`eval.py`: harness {meta['harness']}, suite {meta['suite']}, split {meta['split'] or 'all'}, "
            f"{meta['tasks']} tasks x {meta['samples']} samples, temperature {meta['temperature']}, guard "
            f"{meta['guard']}.\n\n" + "\n".join(rows))


def report(results, base_of):
    """Per model: summarize(), overall and per task source and type, and its tool calls on the tasks both it and its
    base (base_of[model]: the base row in its harness) solve."""
    out = {"models": {}}
    by_model = {}
    for r in results:
        by_model.setdefault(r["model"], []).append(r)
    solved = {m: {r["task"] for r in rs if r["score"] == 1.0} for m, rs in by_model.items()}
    for m, rs in by_model.items():
        s, base = summarize(rs), base_of.get(m, m) if isinstance(base_of, dict) else base_of    # or one base's name
        both = solved[m] & solved.get(base, set())
        s["tool_calls_on_both_solved"] = summarize([r for r in rs if r["task"] in both])["tool_calls"]
        s["base_tool_calls_on_both_solved"] = summarize([r for r in by_model.get(base, []) if r["task"] in both])[
            "tool_calls"]
        for key in ("source", "type"):
            s["by_" + key] = {v: summarize([r for r in rs if r[key] == v]) for v in sorted({r[key] for r in rs})}
        out["models"][m] = s
    return out


def bars(title, rows, fmt="{:.2f}", width=560):
    """A horizontal bar chart as inline SVG; rows: [(label, value, (lo, hi) or None)]."""
    vmax = max([v for _, v, _ in rows if v is not None] + [hi for *_, ci in rows if ci for hi in [ci[1]]] + [1e-9])
    h, y, parts = 26 * len(rows) + 30, 24, [f'<text x="0" y="14" font-weight="bold">{html.escape(title)}</text>']
    for label, v, ci in rows:
        w = 0 if v is None else (width - 200) * v / vmax
        parts.append(f'<text x="0" y="{y + 13}">{html.escape(label[:24])}</text>'
                     f'<rect x="170" y="{y}" width="{w:.1f}" height="16" fill="#4a7bd0"/>'
                     f'<text x="{175 + w:.1f}" y="{y + 13}">{"-" if v is None else fmt.format(v)}</text>')
        if ci:
            x0, x1 = 170 + (width - 200) * ci[0] / vmax, 170 + (width - 200) * ci[1] / vmax
            parts.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y + 8}" y2="{y + 8}" stroke="#222" '
                         f'stroke-width="2"/>')
        y += 26
    return f'<svg width="{width}" height="{h}" font-family="sans-serif" font-size="12">{"".join(parts)}</svg>'


def write_html(path, rep, meta):
    ms = rep["models"]
    charts = [bars("mean score (95% interval)", [(m, s["score"], s["score_ci95"]) for m, s in ms.items()]),
              bars("pass@1 (95% interval)", [(m, s["pass@1"], s["ci95"]) for m, s in ms.items()], "{:.0%}"),
              bars("mean tool calls", [(m, s["tool_calls"], None) for m, s in ms.items()], "{:.1f}"),
              bars("mean tool calls on tasks solved by both base and model",
                   [(m, s["tool_calls_on_both_solved"], None) for m, s in ms.items()], "{:.1f}"),
              bars("guard blocks", [(m, s["blocked"], None) for m, s in ms.items()], "{:.0f}")]
    rows = "".join(f"<tr><td>{html.escape(m)}</td><td>{s['graded']}/{s['n']}</td><td>{_f(s['score'], '{:.3f}')}"
                   f"</td><td>{s['score_ci95'][0]:.3f} - {s['score_ci95'][1]:.3f}</td><td>{_f(s['pass@1'], '{:.1%}')}"
                   f"</td><td>{s['ci95'][0]:.1%} - {s['ci95'][1]:.1%}</td><td>{_f(s['tool_calls'])}</td>"
                   f"<td>{_f(s['tool_calls_solved'])}</td><td>{s['blocked']}</td>"
                   f"<td>{html.escape(_why(s))}</td></tr>"
                   for m, s in ms.items())
    per = "".join(f"<h3>{html.escape(m)}</h3>" + "".join(
        f"<p>by {k[3:]}: " + ", ".join(f"{html.escape(v)} {_f(x['pass@1'], '{:.0%}')} (n={x['graded']})"
                                       for v, x in s[k].items()) + "</p>" for k in ("by_source", "by_type"))
        for m, s in ms.items())
    Path(path).write_text(f"""<!doctype html><html><head><meta charset="utf-8"><title>harness-rl eval</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:900px}}td,th{{padding:4px 10px;text-align:left}}</style>
</head><body><h1>harness-rl evaluation</h1><p>{html.escape(json.dumps(meta))}</p>
<table><tr><th>model</th><th>graded</th><th>mean score</th><th>95% interval</th><th>pass@1</th><th>95% interval</th>
<th>tool calls</th><th>per solved</th><th>guard blocks</th><th>ungraded</th></tr>
{rows}</table>{''.join(f'<p>{c}</p>' for c in charts)}{per}</body></html>""")


def _f(v, fmt="{:.2f}"):
    return "-" if v is None else fmt.format(v)


def run_split(adapters, seed, model):
    """The split (and warm start, suite, harness, base) of the run the adapters come from (its split.json,
    config.json); None for adapters from no run. Raises ValueError for runs split, warm-started or based
    differently, another --seed, or another --model."""
    splits = {}
    for d in dict.fromkeys(Path(a).resolve().parent.parent for a in adapters):
        if not (d / "split.json").is_file():
            continue
        try:
            m, c = json.loads((d / "split.json").read_text()), json.loads((d / "config.json").read_text())
            if not (isinstance(m, dict) and isinstance(c, dict) and isinstance(m.get("eval"), list)
                    and isinstance(m.get("seed"), int) and isinstance(m.get("base", ""), str)):
                raise ValueError("no 'eval' list or 'seed', or a 'base' that is not a folder's name")
        except (OSError, ValueError) as e:
            raise ValueError(f"{d / 'split.json'}: not a run's split ({e})") from None
        ran = [x for x in (c.get("model"), c.get("recipe")) if x is not None]     # a row, its checkpoint (organism: tiny)
        if ran and model not in ran:
            raise ValueError(f"--model {model}: the adapters of {d} trained on --model "
                             f"{c.get('recipe') or c['model']}; give that")
        splits[d] = {**m, "warm_start": c.get("warm_start"), "suite": c.get("suite"),
                     "base": m.get("base"),       # the folder its adapters trained on (train.py records it)
                     "harness": [h.strip().partition(":")[0] for h in str(c.get("harness") or "").split(",")
                                 if h.strip()],      # every harness of the run: its warm start's base
                     "trainers": {h.strip().replace(":", "-", 1): h.strip().partition(":")[0]     # train.trainer_name
                                  for h in str(c.get("harness") or "").split(",") if h.strip()}}
    if not splits:
        return None
    (first, m), *rest = splits.items()
    same = lambda x: [sorted(x["eval"]), x["warm_start"], x["suite"], x["harness"]]       # noqa: E731
    for d, other in rest:
        if same(other) != same(m):
            raise ValueError(f"--adapters from runs split, warm-started or run differently: {first} and {d}")
    if len({Path(x["base"]).name for x in splits.values() if x["base"]}) > 1:       # a name is a model
        raise ValueError("--adapters from runs on different bases: "
                         + ", ".join(f"{d} on {x['base']}" for d, x in splits.items() if x["base"]))
    m["base"] = next((x["base"] for x in splits.values() if x["base"]), None)
    if seed is not None and seed != m["seed"]:
        raise ValueError(f"--seed {seed}: the adapters' run {first} was split with seed {m['seed']}")
    print(f"eval.py: the held-out split of {first / 'split.json'} (seed {m['seed']}, {len(m['eval'])} held out)",
          flush=True)
    return m


async def evaluate(args):
    given = {k: v for k, v in vars(args).items() if v is not None and k != "model"}   # the row's checkpoint stays
    cfg = {**recipe_config(args.model, args.recipe, prog="eval.py"), **given}
    if args.no_warm_start:
        cfg["warm_start"] = None
    if args.oracle:     # no model limits: the harnesses' own context (opencode's prompt alone is ~8k tokens)
        cfg.update({k: given.get(k, SHARED[k]) for k in ("context", "max_tokens")})
    validate(cfg, "eval.py")
    manifest = run_split(args.adapters, args.seed, args.model)
    seed = manifest["seed"] if manifest else args.seed or 0
    if manifest:        # the run's own warm start and (unless --suite) suite
        cfg["warm_start"] = None if args.no_warm_start else manifest["warm_start"]
        cfg["suite"] = given.get("suite") or manifest["suite"] or cfg["suite"]
    held = split_manifest(load_tasks(cfg["suite"]), HOLDOUT, seed) if manifest is None else manifest
    if args.split is None:      # a suite no run trains on (toyheld) is held out whole
        args.split = "all" if eval_only(cfg["suite"]) else "eval"
    args.split = None if args.split == "all" else args.split
    # the base: the one a run's adapters trained on (its split.json's record, while that folder is there), else the
    # one a run starts from (the row's agentic base when it has a warm start, made without the held-out tasks, for
    # every harness of the adapters' run); the oracle needs only the model's chat format
    # (--no-warm-start: the plain model, the record set aside where the run had a warm start)
    manifest = manifest or {}
    trained = None if args.no_warm_start and manifest.get("warm_start") else manifest.get("base")
    build = lambda: warmstart.base_path(cfg, manifest.get("harness") or [cfg["harness"]], held["eval"])  # noqa: E731
    what = f"--adapters of {Path(args.adapters[0]).resolve().parent.parent}" if args.adapters else "--model"
    path = tiny.model_path(cfg["model"]) if args.oracle else await asyncio.to_thread(
        rundir.same_base, trained, build, what)
    if trained and Path(trained) == path:
        print(f"eval.py: the base the adapters trained on, {path}", flush=True)
    if not args.recipe and cfg["recipe"] != args.model:
        print(f"eval.py: {args.model} has no row in recipe.py's table: {cfg['recipe']}'s numbers (harness "
              f"{cfg['harness']}, suite {cfg['suite']}, max tokens {cfg['max_tokens']}, context {cfg['context']}); "
              "--recipe tiny for the CPU demo's", file=sys.stderr, flush=True)
    out = Path(args.out or f"runs/eval-{time.strftime('%Y%m%d-%H%M%S')}")
    tasks = load_tasks(cfg["suite"], split=args.split, manifest=held)
    if args.limit:
        tasks = tasks[:args.limit]
    if not tasks:
        raise SystemExit(f"eval.py: no task in --suite {cfg['suite']} --split {args.split} (the {args.split} split is "
                         f"the {'run' if manifest else 'seed'}'s; a suite it never saw has none: --split all)")
    out.mkdir(parents=True, exist_ok=True)
    names, ranks = {}, []
    for a in args.adapters:
        ranks.append(lora.read_adapter(a)[0]["r"])          # fail early, naming the bad adapter
        names[Path(a).name if Path(a).name not in names else f"{Path(a).name}-{len(names)}"] = a
    # each adapter of a run in the harness it was trained in (--harness: all in that one); the base in each of them
    trainers = manifest.get("trainers") or {}
    drives = {n: args.harness or trainers.get(Path(a).name.rpartition("-v")[0]) or cfg["harness"]
              for n, a in names.items()}
    kinds = list(dict.fromkeys(drives.values())) or [cfg["harness"]]
    base = "oracle" if args.oracle else args.model
    bases = {h: base if len(kinds) == 1 else f"{base}@{h}" for h in kinds}
    drives |= {b: h for h, b in bases.items()}
    base_of = {n: bases[h] for n, h in drives.items()}
    harnesses = {h: get_harness(h) for h in kinds}
    for h in harnesses.values():
        await asyncio.to_thread(h.install)
    sandbox, warning = harborenv.resolve_sandbox(args.sandbox, tasks, [p for h in harnesses.values()
                                                               for p in h.sandbox_paths()])   # before a server starts
    if warning:
        print(warning, file=sys.stderr, flush=True)
    proxies = []
    if args.oracle:     # the scripted model: the task's solution as tool calls, in --model's chat format
        handle = oracle.start(ChatFormat.from_checkpoint(path), lambda rid: next(
            (p.rollouts[rid] for p in proxies if rid in p.rollouts), None), waste=args.waste, reply=args.reply,
            seed=seed, sandbox=sandbox, late=args.late)
    else:   # vLLM: every adapter resident at once (the recipe evaluates 9 checkpoints in one job)
        handle = inference.start_server(args.server, path, name=args.model, context=cfg["context"], run_dir=out,
                                rank=max(ranks, default=None), max_loras=max(1, len(names)))
    client = servers.Client(handle.url, handle.api_key)
    results, pools = [], {}
    models = [*bases.values(), *names]
    # on the server, eval's adapters are eval-<name>: a trainer sharing the server names its versions <name>
    # too (mini-v24), and eval must neither replace nor unload those; folders: a --model path is not one
    served = {m: base if m in bases.values() else f"eval-{m}" for m in models}
    folder = {m: m if m not in bases.values() else "oracle" if args.oracle else f"base-{Path(m).name}" for m in models}
    t0, ticker = time.time(), None
    try:
        for n, a in names.items():
            await client.load_adapter(served[n], Path(a).resolve(), replace=True)
        # One pool per model (the one the trainer uses): each task is a group of --samples rollouts, the
        # sessions split evenly; the reward is train.py's, with this recipe's numbers.
        for m in models:
            proxy = Proxy(client, lambda m=m: (served[m], 0),
                            {k: cfg[k] for k in ("temperature", "top_p", "max_tokens")}, guard=args.guard == "on")
            proxies.append(proxy)
            await proxy.start()
            it = iter(tasks)
            pools[m] = RolloutPool(harnesses[drives[m]], proxy, lambda it=it: next(it, None), lambda: 0,
                                     out / "sandboxes" / folder[m],
                                     max_sessions=max(1, cfg["sessions"] // len(models)), group_size=args.samples,
                                     max_tokens=cfg["max_tokens"], context=cfg["context"], sandbox=sandbox,
                                     rollouts_dir=out / "rollouts" / folder[m], reward=rollout_reward(cfg))
        print(f"evaluating {len(models)} models x {len(tasks)} tasks x {args.samples} samples "
              f"= {len(models) * len(tasks) * args.samples} sessions on {handle.url} (harness {', '.join(kinds)}, "
              f"suite {cfg['suite']}, split {args.split or 'all'}, max tokens {cfg['max_tokens']}, temperature "
              f"{cfg['temperature']})", flush=True)
        for p in pools.values():
            p.start()

        async def collect(m, pool):
            for _ in tasks:
                g = await pool.groups.get()
                for r in g.rollouts:
                    results.append({"model": m, "task": g.task.name, "source": g.task.source, "type": g.task.type,
                                    "sample": r.index, "score": r.score, "reward": r.reward, "tool_calls": r.tool_calls,
                                    "blocked": r.blocked, "reason": r.reason, "failure": r.failure,
                                    "timed_out": r.timed_out, "harness_failed": r.harness_failed,
                                    "turns": len(r.turns),
                                    "prompt_tokens": len(r.turns[0].prompt_ids) if r.turns else 0,
                                    "answer": r.final_message[:300], "errors": [str(e)[:300] for e in r.errors]})
                    print(f"  {m:<20} {g.task.name:<32} score {r.score} tools {r.tool_calls}"
                          f"{' BLOCKED' if r.blocked else ''}", flush=True)
            if m in names:                       # done with this adapter: its slot is free (best effort)
                try:
                    await client.unload_adapter(served[m])
                except RuntimeError as e:
                    print(f"eval.py: could not unload {served[m]}: {e}", file=sys.stderr, flush=True)
        async def progress(total):      # a group is all --samples of a task: its lines come only when it ends
            while True:
                await asyncio.sleep(PROGRESS_EVERY)
                print(f"eval.py: {sum(p.done for p in pools.values())} of {total} sessions done, "
                      f"{time.time() - t0:.0f} s", flush=True)

        ticker = asyncio.create_task(progress(len(models) * len(tasks) * args.samples))
        await asyncio.gather(*(collect(m, p) for m, p in pools.items()))
    finally:                                      # every path: sessions, proxies, client, server
        if ticker:
            ticker.cancel()
        for p in pools.values():
            await p.stop()
        for p in proxies:
            await p.stop()
        await client.close()
        handle.stop()
    results.sort(key=lambda r: models.index(r["model"]))       # the table's rows: base, then --adapters in order
    rep = report(results, base_of)
    meta = {"model": args.model, "recipe": cfg["recipe"], "harness": ", ".join(kinds), "harnesses": drives,
            "suite": cfg["suite"],
            "split": args.split, "guard": args.guard, "samples": args.samples,
            **{k: cfg[k] for k in ("temperature", "top_p", "max_tokens", "context", "bonus", "bonus_scale")},
            "tasks": len(tasks), "seconds": round(time.time() - t0, 1), "adapters": names}
    (out / "result.json").write_text(json.dumps({"meta": meta, **rep, "rollouts": results}, indent=1))
    write_html(out / "report.html", rep, meta)
    if not args.oracle:
        for n, a in names.items():      # each adapter's model card gets its row beside the base's
            hub.write_eval(a, card_table(rep, [base_of[n], n], {**meta, "harness": drives[n]}))
    print(f"\n{len(tasks)} tasks ({cfg['suite']}, split {args.split or 'all'}) x {args.samples} samples, "
          f"{meta['seconds']} s\n{table(rep)}")
    print(f"\nwrote {out / 'result.json'} and {out / 'report.html'}")
    return rep


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    recipe = "(default: the model's recipe row in recipe.py's table)"
    ap.add_argument("--model", required=True, help="as in train.py: tiny, a recipe name, a repo id, a folder or .gguf")
    ap.add_argument("--recipe", help="recipe.py's recipe row for the numbers below when --model is a path "
                                     "(default: the model's own row, else LFM3-1.7B)")
    ap.add_argument("--harness", help=f"pi, opencode, hermes or mini {recipe}")
    ap.add_argument("--adapters", nargs="*", default=[],
                    help="PEFT adapter folders to compare with the base (default: none, the base alone)")
    ap.add_argument("--suite", help=f"task suites under data/ (comma-separated) or a folder {recipe}")
    ap.add_argument("--split", choices=["eval", "train", "all"],
                    help="the held-out tasks, the training ones, or all (default: eval; all for toyheld, a suite held "
                         "out whole)")
    ap.add_argument("--samples", type=int, default=1, help="rollouts per task and model (default: %(default)s)")
    ap.add_argument("--sessions", type=int, help=f"concurrent sessions, split evenly over the models {recipe}")
    ap.add_argument("--server", default="local", help="local (embedded), vllm or a URL (default: %(default)s)")
    ap.add_argument("--guard", default="on", choices=["on", "off"],
                    help="off: the ablation, calls not checked (default: on)")
    ap.add_argument("--sandbox", default="auto", choices=SANDBOXES + ("harbor:docker",),
                    help="as in train.py, Harbor's environments here only (default: %(default)s)")
    ap.add_argument("--temperature", type=float, help=f"sampling temperature {recipe}")
    ap.add_argument("--top-p", type=float, help=f"nucleus sampling {recipe}")
    ap.add_argument("--max-tokens", type=int, help=f"tokens per model turn {recipe}")
    ap.add_argument("--context", type=int, help=f"the model's context length {recipe}")
    ap.add_argument("--oracle", action="store_true",
                    help="the oracle agent instead of a model (oracle.py): each task's solution as tool calls through "
                         "the harness, in --model's chat format (its ATIF files are demonstrations for sft.py); "
                         "a check of tasks, harness and guard; --context / --max-tokens default to the recipe's "
                         "131072 / 4096 (default: off)")
    ap.add_argument("--waste", type=int, default=0,
                    help="--oracle: at most this many redundant calls per rollout, a seeded number (default: 0)")
    ap.add_argument("--late", type=float, default=0.3,
                    help="--oracle: the share of the redundant calls that re-check what was written, after the write "
                         "(the tiny row's warm start: 0.1; default: 0.3)")
    ap.add_argument("--reply", default="file", choices=["file", "text"],
                    help="--oracle: write answer.txt (file) or give its content as the final reply (default: file)")
    ap.add_argument("--no-warm-start", action="store_true",
                    help="the base is --model itself, not its recipe row's agentic base (as train.py), nor the "
                         "agentic base a run's adapters trained on (its split.json's record; default: off)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N tasks (default: all)")
    ap.add_argument("--seed", type=int, help="seed of the holdout split (default: the adapters' run's, from its "
                                             "split.json; else 0)")
    ap.add_argument("--out", help="output folder (default: runs/eval-<time>)")
    args = ap.parse_args(argv)
    if args.samples < 1 or args.limit < 0 or args.waste < 0:
        ap.error(f"--samples must be >= 1, --limit and --waste >= 0 (got {args.samples}, {args.limit}, {args.waste})")
    if not 0 <= args.late <= 1:         # NaN fails too
        ap.error(f"--late must be a share from 0 to 1 (got {args.late})")
    if args.oracle and args.adapters:
        ap.error("--oracle plays the tasks' solutions: it takes no --adapters")
    try:
        asyncio.run(evaluate(args))
    except (checkpoint.CheckpointError, lora.AdapterError, TaskError, RuntimeError, ValueError,
            rundir.ResumeError) as e:
        sys.exit(f"eval.py: {e}")


if __name__ == "__main__":
    main()
