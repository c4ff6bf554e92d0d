"""plan.py: where a run goes on 1, 2 and 4 GPUs, what each device holds, a plan that does not fit refused naming the
number, `train.py --plan` for every recipe row, and the plan's training numbers against a measured step (bench/plan.py,
the tiny checkpoint's shape on this CPU: within 15 %)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import plan
import recipe
from train import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("row,gpus,serve,train", [
    ("LFM3-1.7B", 1, [0], [0]), ("LFM3-1.7B", 2, [0], [1]), ("LFM3-1.7B", 4, [0], [1, 2, 3]),     # embedded server
    ("LFM2.5-24B-A2B", 1, [0], [0]), ("LFM2.5-24B-A2B", 2, [0], [1]), ("LFM2.5-24B-A2B", 4, [0, 1], [2, 3]),  # vLLM
    ("tiny", 0, [], [])])
def test_placement_for_1_2_and_4_gpus(row, gpus, serve, train):
    cfg = dict(recipe.recipe_config(row), gpus=gpus)
    serve_on, train_on, share = plan.place(cfg, gpus)
    assert (serve_on, train_on) == (serve, train)
    if cfg["server"] == "vllm":
        assert share == (0.5 if serve == train else cfg["gpu_memory"])     # vLLM beside training: capped at half
    where, devices = plan.make(cfg, plan.model_config(cfg["model"])[0], gpus=gpus)
    assert where == (serve, train)
    names = [d.name for d in devices]
    assert names == (["cpu"] if not gpus else [f"cuda:{g}" for g in dict.fromkeys(train + serve)])
    for d in devices:
        trains, serves = d.name in [f"cuda:{g}" for g in train] or d.name == "cpu", \
            d.name in [f"cuda:{g}" for g in serve] or d.name == "cpu"
        assert ("activations" in d.items) == trains and ("adapters + AdamW" in d.items) == trains
        if cfg["server"] == "local":
            assert ("K/V budget" in d.items) == serves and ("weights" in d.items) == (trains or serves)
        else:
            assert ("vLLM" in d.items) == serves and ("K/V budget" not in d.items)
        assert 0 < d.total <= d.memory, (d.name, d.items)


def test_a_server_gpu_apart_from_training_holds_its_own_copy_and_the_rest_as_kv():
    cfg = recipe.recipe_config("LFM3-1.7B")
    config = plan.model_config("LFM3-1.7B")[0]
    _, devices = plan.make(cfg, config, gpus=2)
    train, serve = devices
    base, lora = plan.param_counts(config, cfg["rank"])
    assert 1.6e9 < base < 1.9e9 and lora > 0                                  # LFM3-1.7B
    assert serve.items["weights"] == train.items["weights"] == base * 2        # bf16, one copy on each
    assert serve.total == pytest.approx(0.9 * serve.memory, rel=1e-6)         # K/V takes what is left, less a tenth
    assert plan.kv_gib(devices) == serve.items["K/V budget"] / plan.GIB
    fixed = plan.make(dict(cfg, kv_cache=10.0), config, gpus=2)[1][1]
    assert fixed.items["K/V budget"] == 10 * plan.GIB                          # --kv-cache is taken as given


def test_the_embedded_server_takes_one_gpu():
    cfg = dict(recipe.recipe_config("LFM3-1.7B"), server_gpus="0,1")
    with pytest.raises(ValueError, match="--server-gpus 0,1: the embedded server decodes on one GPU"):
        plan.place(cfg, 4)


def test_a_plan_that_does_not_fit_is_refused_naming_the_number_and_what_to_change():
    cfg = dict(recipe.recipe_config("LFM3-1.7B"), token_budget=1 << 21, micro_batches=1, recompute="off")
    _, devices = plan.make(cfg, plan.model_config("LFM3-1.7B")[0], gpus=2)
    why = plan.refusal(devices)
    assert why.startswith("the memory plan does not fit cuda:1: ")
    total, act = devices[0].total / plan.GIB, devices[0].items["activations"] / plan.GIB
    assert f"{total:.1f} GiB of 139.7" in why and f"activations ({act:.1f} GiB, 2,097,152 tokens" in why
    assert "raise --micro-batches, lower --token-budget or turn --recompute on" in why
    assert plan.refusal(plan.make(recipe.recipe_config("LFM3-1.7B"), plan.model_config("LFM3-1.7B")[0], gpus=2)[1]) is None
    p = subprocess.run([sys.executable, str(ROOT / "train.py"), "--model", "LFM3-1.7B", "--plan", "--token-budget",
                        str(1 << 21), "--micro-batches", "1", "--recompute", "off"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode != 0 and "memory plan for LFM3-1.7B" in p.stdout and "DOES NOT FIT" in p.stdout
    assert p.stderr.strip().splitlines()[-1].startswith("train.py: the memory plan does not fit cuda:1"), p.stderr


@pytest.mark.parametrize("row", list(recipe.RECIPES))
def test_plan_prints_every_recipe_row_and_exits(row, capsys):
    main(["--model", row, "--plan"])
    out = capsys.readouterr().out
    assert out.startswith(f"memory plan for {recipe.recipe_config(row)['model']}")
    gpus = recipe.recipe_config(row).get("gpus") or 0
    devices = [line for line in out.splitlines() if line.startswith("  ") and not line.startswith("    ")]
    assert len(devices) == (1 if not gpus else 2)        # the server's GPU(s), the trainers' (ranks alike: once)
    assert "DOES NOT FIT" not in out and "activations" in out
    if gpus:
        assert "no GPU here: planned for H200s" in out
    assert not (Path("runs") / row).exists()                 # nothing started


def test_plan_is_within_15_percent_of_a_measured_step_on_this_cpu():
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "plan.py"), "--json", "--rows",
                        "tiny:8192:off,tiny:8192:on"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(rows) == 2
    for r in rows:
        assert 0.85 <= r["plan"] / r["measured"] <= 1.15, r


def test_a_kv_budget_under_one_context_row_is_refused_and_a_host_misfit_only_warned(monkeypatch, capsys):
    cfg, config = recipe.recipe_config("LFM3-1.7B"), plan.model_config("LFM3-1.7B")[0]
    _, devices = plan.make(cfg, config, gpus=1, gpu_memory=12 * plan.GIB)     # fits, with no room for K/V
    why = plan.refusal(devices)
    assert why.startswith("the memory plan does not fit cuda:0: its K/V budget of ")
    assert "less than one --context row (131,072 positions" in why and "set --kv-cache" in why
    tiny = recipe.recipe_config("tiny")
    monkeypatch.setattr(plan, "cpu_available", lambda: 1 << 30)          # a 1 GiB machine: over, but only warned
    assert plan.check(tiny, plan.model_config("tiny")[0]) == 0
    assert "train.py: warning: the memory plan does not fit cpu" in capsys.readouterr().err


def test_device_puts_training_there_and_vllm_beside_it_is_capped():
    moe = dict(recipe.recipe_config("LFM2.5-24B-A2B"), device="cuda:0")
    assert plan.place(moe, 4) == ([0, 1], [0], 0.5)
    assert plan.place(dict(moe, device="cuda:3"), 4) == ([0, 1], [3], moe["gpu_memory"])
    assert plan.place(dict(moe, device="cpu"), 4) == ([0, 1], [], moe["gpu_memory"])
    lfm3 = dict(recipe.recipe_config("LFM3-1.7B"), device="cuda:1")
    assert plan.place(lfm3, 2) == ([1], [1], 0)                               # the embedded server beside it
    where, devices = plan.make(dict(recipe.recipe_config("tiny"), device="cpu:0"), plan.model_config("tiny")[0], gpus=0)
    assert [d.name for d in devices] == ["cpu:0"] and devices[0].memory < 1e12     # host memory, not an H200


def test_more_training_gpus_than_micro_batches_is_refused():
    cfg = dict(recipe.recipe_config("LFM3-1.7B"), gpus=8)
    where = plan.place(cfg, 8)[:2]
    assert where == ([0], list(range(1, 8)))
    assert "7 training GPUs but 4 micro-batches" in plan.placement_problem(cfg, where)
    assert plan.placement_problem(dict(cfg, micro_batches=7), where) is None
    p = subprocess.run([sys.executable, str(ROOT / "train.py"), "--model", "LFM3-1.7B", "--plan", "--gpus", "8"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "raise --micro-batches to 7 or lower --gpus" in p.stderr


@pytest.mark.parametrize("flags,says", [
    (["--server-gpus", "a"], "--server-gpus 'a': comma-separated GPU indices"),
    (["--device", "bogus"], "--device 'bogus' is not a torch device"),
    (["--model", "/nonexistent"], "no config.json for '/nonexistent'")])
def test_plan_with_bad_input_says_one_line(flags, says):
    argv = ["--model", "LFM3-1.7B", "--plan", *flags]
    p = subprocess.run([sys.executable, str(ROOT / "train.py"), *argv], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode != 0 and "Traceback" not in p.stderr and says in p.stderr, p.stderr[-1500:]
