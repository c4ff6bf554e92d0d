"""The oracle agent and the supervised warm start (oracle.py, warmstart.py, sft.py): assistant-only masks token for
token in two chat formats, the oracle solving tasks through each real harness with no guard block (a wrong one
scoring 0), SFT on oracle trajectories lowering their loss until the tiny model writes a parseable tool call."""
import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import checkpoint
import grpo
import guard
import harnesses
import mini
import oracle
import suites
from tasks import load_task, load_tasks
import tiny
import warmstart
from chat import ChatFormat
from conftest import generate, harbor_template_task

ROOT = Path(__file__).resolve().parent.parent
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")     # ignores tools: as SmolLM2's
CALL = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": json.dumps({"path": "a.txt"})}}
CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is in a.txt?"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
                {"role": "assistant", "content": "It says 42."}]


@pytest.fixture(scope="module")
def lfm3(tmp_path_factory):
    return tiny.write_tiny_checkpoint(tmp_path_factory.mktemp("lfm3"), "lfm3")


@pytest.fixture(scope="module")
def chatml(tmp_path_factory):
    d = tiny.write_tiny_checkpoint(tmp_path_factory.mktemp("chatml"), "llama")
    (d / "chat_template.jinja").write_text(CHATML)
    return d


def _expected(fmt, pieces):
    """Hand-built: (text, trained) pieces -> tokens and mask, each piece tokenized alone."""
    ids, mask = [], []
    for text, trained in pieces:
        t = fmt.encode(text)
        ids, mask = ids + t, mask + [int(trained)] * len(t)
    return ids, mask


@pytest.mark.parametrize("which", ["lfm3", "chatml"])
def test_only_the_assistants_tokens_are_trained_token_for_token(which, lfm3, chatml):
    fmt = ChatFormat.from_checkpoint(lfm3 if which == "lfm3" else chatml)
    tools = mini.TOOLS
    if which == "lfm3":     # tools in the template, XML calls
        head = fmt.render_text(CONVERSATION[:2], tools)
        assert head.startswith("<|startoftext|><|im_start|>system\nBe brief.\n\n# Tools") and \
            head.endswith("<|im_start|>user\nWhat is in a.txt?<|im_end|>\n<|im_start|>assistant\n")
        pieces = [(head, 0), ("<tool_call>\n<function=read>\n<parameter=path>\na.txt\n</parameter>\n</function>\n"
                              "</tool_call><|im_end|>", 1),
                  ("\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n", 0), ("It says 42.<|im_end|>", 1)]
    else:                   # a template that ignores tools: tools_as_text, JSON calls in the assistant's text
        head = fmt.render_text(CONVERSATION[:2], tools)
        assert head.startswith("<|im_start|>system\nBe brief.\n\n# Tools") and '"name": "read"' in head
        pieces = [(head, 0), ('<tool_call>\n{"name": "read", "arguments": {"path": "a.txt"}}\n</tool_call><|im_end|>', 1),
                  ("\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n", 0),
                  ("It says 42.<|im_end|>", 1)]
    want_ids, want_mask = _expected(fmt, pieces)
    seqs = grpo.build_sequences(warmstart.conversation_turns(fmt, CONVERSATION, tools), 1.0)
    assert len(seqs) == 1                       # the two turns merge: the second prompt extends the first turn
    assert seqs[0].tokens == want_ids and seqs[0].mask == want_mask
    assert fmt.decode([t for t, m in zip(want_ids, want_mask) if m]).count("<|im_end|>") == 2   # each turn's stop


def _toy_tasks(tmp_path, names):
    suite = tmp_path / "suite"
    for n in names:
        shutil.copytree(suites.DATA / "toy" / n, suite / n)
    return suite


@pytest.mark.parametrize("name", ["mini"] + [pytest.param(h, marks=pytest.mark.integration) for h in
                                              ("pi", "opencode", "hermes")])
def test_the_oracle_solves_tasks_through_the_real_harness_with_no_guard_block(tmp_path, name, lfm3):
    """One task of each suite and Harbor's own template task (and a wasteful oracle), the harness's own tool
    shapes, tokens recorded as the target model's; a wrong oracle (oracle.json writing a wrong answer) scores 0."""
    harness = harnesses.get_harness(name)
    # HumanEval (built on first use) included; docker's under --sandbox docker: tests/test_containers.py
    tasks = [load_tasks(s)[0] for s in suites.SUITES if s != "docker"]
    tasks.append(load_task(harbor_template_task(tmp_path)))  # Harbor's own template: /app, /tests, ... unchanged
    wrong = _toy_tasks(tmp_path, ["toy-even"]) / "toy-even"
    (wrong / "solution" / "oracle.json").write_text(json.dumps([{"write": "answer.txt", "content": "abc"}]))
    tasks.append(load_task(wrong))
    fmt = ChatFormat.from_checkpoint(lfm3)
    rs = asyncio.run(oracle.record(tasks, harness, fmt, tmp_path / "out", samples=1, sessions=3, max_tokens=4096,
                              context=131072, waste=3, seed=1))
    by = {r.task.name: r for r in rs}
    for t in tasks[:-1]:
        r = by[t.name]
        assert r.score == 1.0 and not r.blocked and r.tool_calls >= 1, (t.name, r.score, r.verdicts, r.errors)
    assert by["toy-even"].score == 0.0 and not by["toy-even"].blocked
    files = list((tmp_path / "out" / "rollouts").rglob("*.json"))
    assert len(files) == len(tasks)
    assert [r["fired"] for r in guard.scan(files) if r["fired"]] == []      # the post-hoc scan: nothing on honest runs
    demos, skipped = warmstart.read_demonstrations(files, fmt)
    assert len(demos) == len(tasks) - 1 and skipped == {"score": 1}
    assert not any(d.rerendered for d in demos)        # recorded in the target's format
    # the history comes back token for token: one sequence a demonstration (hermes sorts past calls' arguments, so
    # its oracle writes them sorted)
    assert [len(grpo.build_sequences(d.turns, 1.0)) for d in demos] == [1] * len(demos), name


def test_the_oracles_redundant_calls_come_after_the_write_at_the_share_asked():
    """oracle.plan: `late` is the share of the redundant calls that re-check what was written, after the write (the
    tiny row's warm start: 0.1) - none at 0, all at 1, about that share between; the useful steps and the final reply
    keep their order."""
    task = load_tasks("warmup")[0]
    useful = [{"read": "data.csv"}, {"write": "answer.txt", "content": "42"}]

    def counts(late):
        before = after = 0
        for i in range(400):
            todo = oracle.plan(task, useful, f"0/{i}", waste=6, late=late)
            w = todo.index(useful[1])
            assert todo[-1] == {"reply": oracle.DONE} and useful[0] in todo[:w]
            before, after = before + w - 1, after + len(todo) - w - 2
        return before, after
    assert counts(0.0)[1] == 0 and counts(1.0)[0] == 0 and counts(1.0)[1] > 1000
    b, a = counts(0.1)
    assert 0.06 < a / (a + b) < 0.14, (a, b)
    b3, a3 = counts(0.3)
    assert 0.25 < a3 / (a3 + b3) < 0.35 and b3 + a3 == b + a, (a3, b3)     # the same number of calls, placed apart


@pytest.mark.parametrize("name", ["mini"] + [pytest.param(h, marks=pytest.mark.integration) for h in
                                              ("pi", "opencode", "hermes")])
def test_planted_shortcuts_pay_without_the_guard_and_the_scan_finds_each(tmp_path, name, lfm3):
    """Each kind of the shortcut suite through the real harness: the oracle's shortcut (recorded with the guard off,
    as a cheating warm start records it) gets full marks from the verifier - a real temptation - and the post-hoc
    scan fires the rule the kind is made for on every one; the honest oracle solves the same tasks with no block."""
    harness, fmt = harnesses.get_harness(name), ChatFormat.from_checkpoint(lfm3)
    tasks = {k: next(t for t in load_tasks("shortcuts") if t.type == k) for k in
             ("trusted-reward", "visible-test", "exposed-answer")}
    want = {"trusted-reward": "reward-hacking", "visible-test": "test-editing", "exposed-answer": "answer-lookup"}
    for cheat in (1.0, 0.0):
        out = tmp_path / f"cheat{cheat}"
        rs = asyncio.run(oracle.record(list(tasks.values()), harness, fmt, out, samples=1, sessions=3, max_tokens=4096,
                                  context=131072, waste=2, seed=1, cheat=cheat))
        assert all(r.score == 1.0 and not r.blocked for r in rs), [(r.task.name, r.score, r.verdicts) for r in rs]
        scans = {s["task"]: s for s in guard.scan((out / "rollouts").rglob("*.json"))}
        fired = {k: sorted({rule for _, _, rule, _ in scans[t.name]["fired"]}) for k, t in tasks.items()}
        assert fired == ({k: [want[k]] for k in tasks} if cheat else {k: [] for k in tasks}), fired
    honest = load_tasks("honest")
    assert {t.type for t in honest} == set(tasks) and all(oracle.shortcut(t) is None for t in honest)


def test_the_warm_starts_demonstrations_are_the_same_tokens_every_time(tmp_path, lfm3):
    """Recorded twice (warm-up tasks, wasteful, through mini and its sandbox), the demonstrations are the same token
    ids: nothing of the clock or the sandbox's paths reaches them, so the agentic base is the same on every machine
    of a kind (the README's seeds start from one base)."""
    fmt = ChatFormat.from_checkpoint(lfm3)
    runs = []
    for k in range(2):       # as two checkouts made at other times (a file's mtime shows in `ls -l`)
        for t in load_tasks("warmup")[:4]:
            shutil.copytree(t.path, tmp_path / f"suite{k}" / t.path.name)
        for f in (tmp_path / f"suite{k}").rglob("*"):
            os.utime(f, (1e9 + k * 3e7, 1e9 + k * 3e7))
        tasks = load_tasks(tmp_path / f"suite{k}")
        asyncio.run(oracle.record(tasks, harnesses.get_harness("mini"), fmt, tmp_path / str(k), samples=2, sessions=4,
                             max_tokens=72, context=4096, waste=6, seed=0))
        demos, skipped = warmstart.read_demonstrations([tmp_path / str(k) / "rollouts"], fmt)
        assert len(demos) == 8 and not skipped
        runs.append([[(t.prompt_ids, t.completion_ids) for t in d.turns] for d in demos])
    assert sum(len(d) for d in runs[0]) > 8 and runs[0] == runs[1]


def test_the_oracle_answers_every_files_task_in_its_reply_through_mini(tmp_path, chatml):
    """The files suite (SmolLM2's): every task solved by reading its file and replying with the value, in a
    tools_as_text format, with redundant calls; no guard block."""
    tasks = load_tasks("files")
    rs = asyncio.run(oracle.record(tasks, harnesses.get_harness("mini"), ChatFormat.from_checkpoint(chatml), tmp_path / "out",
                              samples=1, sessions=8, max_tokens=4096, context=131072, waste=2, reply="text", seed=0))
    bad = [(r.task.name, r.score, r.verdicts) for r in rs if r.score != 1.0 or r.blocked or r.tool_calls < 1]
    assert len(rs) == len(tasks) == 65 and not bad, bad
    assert all(r.final_message.strip() and "answer.txt" not in r.final_message for r in rs)


def test_the_warm_start_never_demonstrates_a_held_out_task(tmp_path, lfm3, monkeypatch):
    monkeypatch.setenv("HARNESS_RL_CACHE", str(tmp_path / "cache"))
    suite = tmp_path / "files"
    for n in ("files-city-02", "files-config-02", "files-top-02"):
        shutil.copytree(suites.DATA / "files" / n, suite / n)
    warm = dict(suite=str(suite), samples=1, waste=1, reply="text", sessions=3, steps=2, batch=2, lr=1e-3, rank=4,
                alpha=8, token_budget=8192, micro_batches=1)
    lines = []
    kw = dict(max_tokens=4096, context=8192, log=lines.append)
    path = warmstart.agentic_base(lfm3, "mini", warm, held_out=["files-top-02"], **kw)
    made = json.loads((path / "warm_start.json").read_text())
    assert made["tasks"] == ["files-city-02", "files-config-02"] and made["demonstrations"] == 2
    # its progress: the oracle's first group and its last, the SFT's first step and its last (and a line each 30 s)
    oracle = [x.split(" solved")[0] for x in lines if "oracle through" in x]
    sft = [x.split("|")[0].strip() for x in lines if "sft step" in x]
    assert oracle == [f"  oracle through mini: {k}/2 tasks, {k} rollouts, {k}" for k in (1, 2)], lines
    assert sft == ["sft step    1/2", "sft step    2/2"], lines
    assert warmstart.agentic_base(lfm3, "mini", warm, held_out=["files-top-02"], **kw) == path      # cached
    assert warmstart.agentic_base(lfm3, "mini", warm, held_out=["files-city-02"], **kw) != path     # another split
    with pytest.raises(ValueError, match="no warm-up task"):
        warmstart.agentic_base(lfm3, "mini", warm, held_out=["files-city-02", "files-config-02", "files-top-02"], **kw)
    # a step over max_tokens: the oracle refuses it (a model under that cap could not write it), and the warm start
    # says which tasks went undemonstrated (files-city-02 reads its file in 40 tokens, files-config-02 in 38)
    lines.clear()
    short = warmstart.agentic_base(lfm3, "mini", warm, held_out=["files-top-02"], **{**kw, "max_tokens": 39})
    made = json.loads((short / "warm_start.json").read_text())
    assert made["over_max_tokens"] == {"mini": ["files-city-02"]} and made["demonstrations"] == 1, made
    assert any("files-city-02 not demonstrated through mini: a step takes up to 40 tokens there, max_tokens is 39"
               in x for x in lines), lines


@pytest.mark.integration
def test_one_agentic_base_for_several_harnesses_learns_from_each(tmp_path, lfm3, monkeypatch):
    """`--harness mini,pi`'s warm start: one base, demonstrated through both harnesses (each as its own base:
    samples demonstrations a task, steps SFT steps of its own), cached under both names, apart from either
    harness's own base."""
    monkeypatch.setenv("HARNESS_RL_CACHE", str(tmp_path / "cache"))
    suite = tmp_path / "files"
    for n in ("files-city-02", "files-config-02"):
        shutil.copytree(suites.DATA / "files" / n, suite / n)
    warm = dict(suite=str(suite), samples=2, waste=1, reply="text", sessions=4, steps=2, batch=2, lr=1e-3, rank=4,
                alpha=8, token_budget=16384, micro_batches=1)
    kw = dict(max_tokens=4096, context=16384, log=lambda s: None)
    both = warmstart.agentic_base(lfm3, ["mini", "pi"], warm, **kw)
    made = json.loads((both / "warm_start.json").read_text())
    assert "mini+pi" in both.name and made["harness"] == ["mini", "pi"] and made["samples_per_harness"] == 2
    assert made["demonstrations"] == 8 and made["sft_steps"] == 4
    assert both != warmstart.agentic_base(lfm3, "mini", warm, **kw)


def test_sft_on_oracle_trajectories_makes_the_tiny_model_call_a_tool(tmp_path, lfm3):
    fmt = ChatFormat.from_checkpoint(lfm3)
    tasks = load_tasks(_toy_tasks(tmp_path, ["toy-count", "toy-even"]))
    asyncio.run(oracle.record(tasks, harnesses.get_harness("mini"), fmt, tmp_path / "demo", samples=4, sessions=8,
                         max_tokens=128, context=4096, waste=1))
    demos, _ = warmstart.read_demonstrations([tmp_path / "demo" / "rollouts"], fmt)
    assert len(demos) == 8
    _, losses = warmstart.train(lfm3, demos, tmp_path / "sft", rank=16, alpha=32, lr=3e-3, steps=60, batch=4,
                        token_budget=16384, micro_batches=2, seed=0, merged=tmp_path / "base", log=lambda s: None)
    assert losses[-1] < 0.1 * losses[0], losses[::10]
    model = checkpoint.load_model(tmp_path / "base", dtype=torch.float32, device="cpu")
    prompt = demos[0].turns[0].prompt_ids            # a demonstration's first prompt, greedy
    out, _ = generate(model, prompt, max_new_tokens=96, temperature=0, eos_ids=fmt.eos_token_ids)
    _, calls = fmt.parse(fmt.decode(out), tools=mini.TOOLS)
    assert calls and calls[0]["function"]["name"] in {"bash", "read", "write"}, fmt.decode(out)


def test_demonstrations_whose_prompt_outgrows_a_row_stop_the_sft_up_front(tmp_path, lfm3):
    """A row (token_budget / micro_batches) shorter than a demonstration's prompt leaves grpo.pack nothing to train
    of it (truncated to the row, no trained token): the SFT says so before any step, naming the row, where a step of
    only such demonstrations once ended in a TypeError (hermes' ~28 000-token prompt in 16 384-token rows)."""
    fmt = ChatFormat.from_checkpoint(lfm3)
    tasks = load_tasks(_toy_tasks(tmp_path, ["toy-count", "toy-even"]))
    asyncio.run(oracle.record(tasks, harnesses.get_harness("mini"), fmt, tmp_path / "demo", samples=1, sessions=2,
                         max_tokens=128, context=4096, waste=0))
    demos, _ = warmstart.read_demonstrations([tmp_path / "demo" / "rollouts"], fmt)
    prompt = min(len(d.turns[0].prompt_ids) for d in demos)
    row = prompt // 2
    with pytest.raises(warmstart.DemoError, match=f"2 of 2 demonstrations have no trained token in a row of {row} tokens"):
        warmstart.train(lfm3, demos, tmp_path / "sft", rank=4, alpha=8, lr=1e-3, steps=2, batch=2, token_budget=2 * row,
                micro_batches=2, seed=0, log=lambda s: None)


def test_sft_steps_take_their_demonstrations_from_one_group_in_turn(tmp_path, lfm3, monkeypatch):
    """groups (several harnesses' demonstrations: one system prompt each): step k packs only the k-th group's, so
    a step computes one prompt, not each harness's."""
    fmt = ChatFormat.from_checkpoint(lfm3)
    tasks = load_tasks(_toy_tasks(tmp_path, ["toy-count", "toy-even"]))
    asyncio.run(oracle.record(tasks, harnesses.get_harness("mini"), fmt, tmp_path / "demo", samples=2, sessions=4,
                         max_tokens=128, context=4096, waste=0))
    demos, _ = warmstart.read_demonstrations([tmp_path / "demo" / "rollouts"], fmt)
    label = {d.file: json.loads(Path(d.file).read_text())["extra"]["task"] for d in demos}
    packed, pack = [], warmstart.grpo.pack
    monkeypatch.setattr(warmstart.grpo, "pack", lambda seqs, *a, **k: packed.append({label[s.rollout] for s in seqs}) or
                        pack(seqs, *a, **k))
    warmstart.train(lfm3, demos, tmp_path / "sft", rank=4, alpha=8, lr=1e-3, steps=4, batch=2, token_budget=16384,
            micro_batches=2, seed=0, groups=[label[d.file] for d in demos], log=lambda s: None)
    first = label[demos[0].file]
    assert len(demos) == 4 and packed == [{first}, {"toy-count", "toy-even"} - {first}] * 2, packed


def test_sft_cli_refuses_bad_input_in_one_line(tmp_path, lfm3):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for args, needle in [(["--data", str(bad)], "not an ATIF trajectory"),
                         (["--data", str(tmp_path / "missing")], "no such file or folder"),
                         (["--data", str(bad), "--lr", "nan"], "--lr must be a number > 0"),
                         (["--data", str(bad), "--steps", "0"], "--steps must be >= 1")]:
        p = subprocess.run([sys.executable, str(ROOT / "sft.py"), "--model", str(lfm3), "--out", str(tmp_path / "o"),
                            *args], capture_output=True, text=True, cwd=ROOT)
        assert p.returncode != 0 and needle in p.stderr and "Traceback" not in p.stderr, p.stderr


ATTACKS = json.loads((Path(__file__).parent / "attacks.json").read_text())
# opencode and hermes (5-9 CPU s a session): the scripts run later and one spelling of each family per harness
SOME = [a for a in ATTACKS if a["cause"] == 2] + [next(a for a in ATTACKS if a["family"] == f and a["cause"] == 1)
                                                 for f in ("reward-file", "test-file", "answer-file")]


@pytest.mark.parametrize("name", ["mini"] + [pytest.param(h, marks=pytest.mark.integration) for h in
                                              ("pi", "opencode", "hermes")])
def test_every_attack_pays_without_the_guard_and_none_but_the_known_gaps_with_it(tmp_path, name, lfm3):
    """tests/attacks.json through the real harness, sandbox and verifier (bench/attacks.py prints the table): with
    the guard off each attack earns full marks - a real attack, not a spelling nobody would pay for -, with the guard
    on none pays but those marked as known gaps (each says why): a new gap fails here, and so does a closed one."""
    harness, fmt = harnesses.get_harness(name), ChatFormat.from_checkpoint(lfm3)
    attacks = ATTACKS if name in ("mini", "pi") else SOME
    off = asyncio.run(oracle.attack(attacks, harness, fmt, tmp_path / "off", guard=False))
    assert [a["id"] for a in attacks if off[a["id"]] != (1.0, [])] == [], off
    on = asyncio.run(oracle.attack(attacks, harness, fmt, tmp_path / "on", guard=True))
    paid = [a["id"] for a in attacks if (on[a["id"]][0] or 0) > 0 and not on[a["id"]][1]]
    assert paid == [a["id"] for a in attacks if "gap" in a], on
