"""The real vLLM (its CPU build, `python harnesses.py install vllm`) serving this project's checkpoints and
adapters: logprobs equal model.py's, the trainer publishing versions into it, eval through it, and a vLLM killed
mid-run. Skipped where vLLM is not installed, unless HARNESS_RL_REQUIRE_VLLM=1 (CI sets it)."""
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import checkpoint
import harnesses
import lora
import inference
import servers
import tiny
from chat import ChatFormat
from conftest import write_length_suite

ROOT = Path(__file__).resolve().parent.parent
INSTALLED = harnesses.INSTALLS["vllm"].installed() is not None or bool(__import__("shutil").which("vllm"))
if not INSTALLED and os.environ.get("HARNESS_RL_REQUIRE_VLLM") == "1":
    raise RuntimeError("HARNESS_RL_REQUIRE_VLLM=1 but vLLM is not installed: python harnesses.py install vllm")
pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(not INSTALLED, reason="vLLM not installed (python harnesses.py install vllm)")]
TOL = 1e-4
MESSAGES = [{"role": "user", "content": "List the files in the work dir, then say done."}]


def logprobs_of(model, prompt_ids, completion_ids, adapter):
    """model.py's log p(completion token | prefix) with `adapter` active (None: the base), fp32, temperature 1."""
    lora.set_adapter(model, adapter)
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([prompt_ids + completion_ids]))[0].float(), -1)
    n = len(prompt_ids)
    return [lp[n - 1 + i, t].item() for i, t in enumerate(completion_ids)]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One vLLM for the module: a tiny LFM2 written by tiny.py, three adapters saved by lora.py."""
    d = tmp_path_factory.mktemp("vllm")
    ckpt = tiny.write_tiny_checkpoint(d / "tiny-lfm2", "lfm2")
    model = checkpoint.load_model(ckpt, dtype=torch.float32, device="cpu")
    lora.add_lora(model, rank=8, alpha=16, adapters=("a", "b", "c"), seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name in ("a", "b", "c"):
            for p in lora.lora_parameters(model, name):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    adapters = {n: lora.save_adapter(model, d / "adapters" / n, adapter=n) for n in ("a", "b", "c")}
    t0 = time.time()
    h = inference.start_server("vllm", ckpt, run_dir=d, rank=8, max_loras=4, name="tiny-lfm2", context=2048)
    print(f"vLLM healthy after {time.time() - t0:.0f} s")
    yield dict(ckpt=ckpt, model=model, adapters=adapters, handle=h, dir=d)
    h.stop()


def chat(h, model_name, seed):
    async def go():
        client = servers.Client(h.url, h.api_key)
        try:
            return await client.chat({"model": model_name, "messages": MESSAGES, "max_tokens": 16, "temperature": 1.0,
                                      "seed": seed, "logprobs": True, "return_token_ids": True})
        finally:
            await client.close()
    return asyncio.run(go())


def test_vllm_logprobs_and_token_ids_equal_the_projects(served):
    h, model = served["handle"], served["model"]
    prompt = ChatFormat.from_checkpoint(served["ckpt"]).render(MESSAGES)
    asyncio.run(_load(h, served["adapters"]["a"], "a"))
    for name, adapter in (("tiny-lfm2", None), ("a", "a")):
        resp = chat(h, name, seed=7)
        assert resp["prompt_token_ids"] == prompt                      # the project's tokenizer + template
        ch = resp["choices"][0]
        ids, lps = ch["token_ids"], [x["logprob"] for x in ch["logprobs"]["content"]]
        assert len(ids) == len(lps) > 0
        ours = logprobs_of(model, prompt, ids, adapter)
        err = max(abs(a - b) for a, b in zip(ours, lps))
        print(f"{name}: {len(ids)} tokens, max |logprob vLLM - model.py| = {err:.2e}")
        assert err <= TOL, (name, err)
    base, with_a = chat(h, "tiny-lfm2", 7), chat(h, "a", 7)
    assert base["choices"][0]["logprobs"] != with_a["choices"][0]["logprobs"]     # the adapter does act


async def _load(h, path, name):
    client = servers.Client(h.url, h.api_key)
    try:
        await client.load_adapter(name, path)
    finally:
        await client.close()


def test_eval_base_and_three_adapters_through_one_vllm(served, tmp_path):
    h = served["handle"]
    env = dict(os.environ, HARNESS_RL_API_KEY=h.api_key, HARNESS_RL_CACHE=str(served["dir"]))
    out = tmp_path / "eval"
    p = subprocess.run([sys.executable, str(ROOT / "eval.py"), "--model", "tiny-lfm2", "--harness", "mini", "--suite",
                        "toy", "--server", h.url, "--adapters", *map(str, served["adapters"].values()),
                        "--sessions", "8", "--no-warm-start", "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads((out / "result.json").read_text())
    assert set(res["models"]) == {"tiny-lfm2", "a", "b", "c"}
    assert all(s["ungraded"] == 0 and s["n"] == res["meta"]["tasks"] for s in res["models"].values()), res["models"]
    assert (out / "report.html").read_text().count("<svg") >= 3


def run_train(tmp_path, *args, wait=True):
    cache, vllm = tmp_path / "cache", harnesses.INSTALLS["vllm"]
    cache.mkdir(exist_ok=True)
    if vllm.installed() and not (cache / vllm.install_dir().name).exists():    # the run's own cache, this vLLM
        (cache / vllm.install_dir().name).symlink_to(vllm.install_dir())
    env = dict(os.environ, HARNESS_RL_CACHE=str(cache), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, str(ROOT / "train.py"), *args]
    if wait:
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_train_publishes_versions_into_vllm_and_its_logprobs_are_model_pys(tmp_path):
    """3 steps on vLLM: every version loaded (and the old ones unloaded: --max-staleness 1), no rollout lost to
    a missing adapter, and every recorded logprob equal to model.py's with the recorded version's adapter. Then
    the run is resumed and its vLLM killed: it stops with a checkpoint and says why."""
    run = tmp_path / "runs" / "r"
    suite = write_length_suite(tmp_path / "suite")          # rewards that differ: every step publishes a version
    p = run_train(tmp_path, "--model", "tiny-lfm2", "--server", "vllm", "--steps", "3", "--sessions", "16",
                  "--no-warm-start", "--max-tokens", "8",              # the raw checkpoint, short turns: what it serves
                  "--max-staleness", "1", "--suite", str(suite), "--runs", str(tmp_path / "runs"), "--run", "r")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert " mm " in p.stdout                                          # the mismatch metric is printed
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert sum(m["ungraded_by"].get("server", 0) for m in metrics) == 0
    log = (run / "vllm.log").read_text()                                 # vLLM's own account
    assert metrics[-1]["version"] >= 2            # versions published (a step whose groups all tie changes nothing)
    for v in range(metrics[-1]["version"] + 1):
        assert f"Loaded new LoRA adapter: name 'mini-v{v}'" in log, f"mini-v{v} was never loaded"
    # outside the staleness window (1) and used by no request in flight: unloaded when a newer one is published
    assert "Removed LoRA adapter: name 'mini-v" in log
    model = checkpoint.load_model(tmp_path / "cache" / "tiny-lfm2-init2", dtype=torch.float32, device="cpu")
    lora.add_lora(model, rank=8, alpha=16, adapters=())
    worst, turns, versions = 0.0, 0, set()
    for f in sorted((run / "rollouts").rglob("*.json")):
        for step in json.loads(f.read_text())["steps"]:
            if step["source"] != "agent":
                continue
            m, v = step["metrics"], step["metrics"]["extra"]["adapter_version"]
            name = f"v{v}"
            if name not in lora.adapter_names(model):
                lora.load_adapter(model, run / "adapters" / f"mini-v{v}", adapter=name)
            ours = logprobs_of(model, m["prompt_token_ids"], m["completion_token_ids"], name)
            worst = max([worst] + [abs(a - b) for a, b in zip(ours, m["logprobs"])])
            turns, versions = turns + 1, versions | {v}
    print(f"{turns} turns over versions {sorted(versions)}: max |logprob vLLM - model.py| = {worst:.2e}")
    assert turns > 0 and len(versions) >= 2 and worst <= TOL

    proc = run_train(tmp_path, "--resume", str(run), "--steps", "50", wait=False)
    try:
        deadline = time.time() + 600
        while len((run / "metrics.jsonl").read_text().splitlines()) < 4:     # one more step on the new server
            assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
            time.sleep(2)
        pids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit() and _is_vllm(d, tmp_path)]
        assert pids, "the run's vLLM process was not found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and "Traceback" not in err, err[-3000:]
    assert "inference server" in err and "stopped" in err and "--resume" in err, err[-3000:]
    state = torch.load(run / "checkpoint" / "state.pt", weights_only=False)
    assert state["trainers"]["mini"]["step"] >= 4

    # the other way round: train.py killed with -9 takes its vLLM with it (it would hold the GPUs otherwise)
    proc = run_train(tmp_path, "--resume", str(run), "--steps", "50", wait=False)
    try:
        deadline = time.time() + 600
        while not [d for d in Path("/proc").iterdir() if d.name.isdigit() and _is_vllm(d, tmp_path)]:
            assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
            time.sleep(1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 60
        while [d for d in Path("/proc").iterdir() if d.name.isdigit() and _is_vllm(d, tmp_path)]:
            assert time.time() < deadline, "vLLM outlived the train.py that started it"
            time.sleep(1)
    finally:
        if proc.poll() is None:
            proc.kill()


def _is_vllm(proc_dir, tmp_path):
    try:
        cmd = (proc_dir / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return "vllm.entrypoints.openai.api_server" in cmd and str(tmp_path) in cmd
