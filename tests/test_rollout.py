"""rollout.py: the guard proxy, sandboxes and the pool, with real harness processes against a scripted
upstream (a small server in vLLM's response shape standing in for the model)."""
import asyncio
import json
import os
import random
import shutil
from pathlib import Path

import pytest
from aiohttp import web

import grpo as G
import harnesses as H
import rollout as R
import serve as S
import tasks as T

SOLVE = "echo 42 > answer.txt"
HACK = "echo 1 > /logs/verifier/reward.txt"


def make_task(root, name="write-42", timeout=60):
    d = Path(root) / name
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "solution").mkdir()
    (d / "environment" / "README.md").write_text("A small work dir.\n")
    (d / "instruction.md").write_text("Write the number 42 into a file named answer.txt in the work dir.\n")
    (d / "task.toml").write_text(f'[task]\nname = "{name}"\n[metadata]\nsource = "toy"\ntype = "build"\n'
                                 f'[agent]\ntimeout_sec = {timeout}\n[verifier]\ntimeout_sec = 10\n')
    (d / "tests" / "test.sh").write_text('#!/bin/bash\nif [ "$(cat "$WORKDIR/answer.txt" 2>/dev/null)" = "42" ]; '
                                         'then echo 1 > "$LOGS_DIR/reward.txt"; else echo 0 > "$LOGS_DIR/reward.txt"; fi\n')
    (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{SOLVE}\n")
    return T.load_task(d)


class Upstream:
    """Answers like our server / vLLM: first turn a shell tool call running `command`, then 'done'.
    Records what it returned, and the requests it saw."""

    def __init__(self, command=SOLVE, fail=False, hang=False):
        self.commands = command if isinstance(command, list) else [command]
        self.fail, self.hang = fail, hang
        self.returned, self.requests = [], []
        self.rng = random.Random(0)

    async def chat(self, request):
        body = await request.json()
        self.requests.append(body)
        if self.hang:
            await asyncio.sleep(3600)
        if self.fail:
            return web.json_response({"object": "error", "message": "boom", "code": 500}, status=500)
        tools = body.get("tools") or []
        shell = next((t["function"]["name"] for t in tools if t["function"]["name"] in ("bash", "terminal")), None)
        done = any(m.get("role") == "tool" for m in body["messages"])
        prompt_ids = [self.rng.randrange(1000) for _ in range(5 + len(body["messages"]))]
        token_ids = [self.rng.randrange(1000) for _ in range(3)]
        lps = [-self.rng.random() for _ in token_ids]
        if shell and not done:
            msg = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{len(self.returned)}_{i}", "type": "function",
                "function": {"name": shell, "arguments": json.dumps({"command": c})}}
                for i, c in enumerate(self.commands)]}
            finish = "tool_calls"
        else:
            msg, finish = {"role": "assistant", "content": "done", "tool_calls": []}, "stop"
        out = {"id": "chatcmpl-x", "object": "chat.completion", "model": body["model"],
               "prompt_token_ids": prompt_ids, "usage": {"prompt_tokens": len(prompt_ids),
                                                         "completion_tokens": 3, "total_tokens": len(prompt_ids) + 3},
               "choices": [{"index": 0, "message": msg, "finish_reason": finish, "token_ids": token_ids,
                            "logprobs": {"content": [{"token": "t", "logprob": lp} for lp in lps]}}]}
        if tools:
            self.returned.append((prompt_ids, token_ids, lps))
        return web.json_response(out)

    async def start(self):
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        self.runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"


async def one(tmp, harness_name, upstream, task=None, timeout=None, sandbox="dir"):
    url = await upstream.start()
    client = S.Client(url, timeout=30)
    proxy = R.Proxy(client, adapter=lambda: ("pi-v3", 3), sampling={"temperature": 0.8, "max_tokens": 256})
    await proxy.start()
    task = task or make_task(tmp / "tasks")
    harness = H.get_harness(harness_name)
    r = R.Rollout(task, harness_name, start_version=3)
    try:
        await R.run_rollout(r, harness, proxy, tmp / "sandboxes", timeout=timeout, sandbox=sandbox)
    finally:
        await proxy.stop()
        await client.close()
        await upstream.runner.cleanup()
    return r


def gone(pid, grace=3.0):
    """No process left in the harness's process group (killed ones may take a moment to be reaped)."""
    import time
    deadline = time.time() + grace
    while True:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        if time.time() > deadline:
            return False
        time.sleep(0.05)


HARNESS_PARAMS = ["mini"] + [pytest.param(h, marks=pytest.mark.integration) for h in ("pi", "opencode", "hermes")]


def need(name):
    if name != "mini":
        try:
            H.get_harness(name).install(quiet=True)
        except Exception as e:   # noqa: BLE001 - report why the real binary is unavailable
            pytest.fail(f"could not install {name}: {e}")


@pytest.mark.parametrize("name", HARNESS_PARAMS)
def test_solved_task_is_graded_and_tokens_are_captured(tmp_path, name):
    need(name)
    up = Upstream()
    r = asyncio.run(one(tmp_path, name, up))
    assert r.errors == [] and r.score == 1.0, (r.errors, r.reason)
    assert r.tool_calls == 1 and not r.flagged
    assert r.reward is None and r.failure == ""           # the reward is the trainer's to decide, once
    assert [(t.prompt_ids, t.completion_ids, t.logprobs) for t in r.turns] == up.returned     # (c)
    assert all(t.version == 3 for t in r.turns)
    sent = [q for q in up.requests if q.get("tools")]
    assert all(q["model"] == "pi-v3" and q["stream"] is False and q["return_token_ids"] and q["temperature"] == 0.8
               and q["max_tokens"] <= 256 for q in sent)
    assert gone(r.pid) and not (tmp_path / "sandboxes" / r.id).exists()


@pytest.mark.parametrize("name", HARNESS_PARAMS)
def test_reward_hacking_call_is_blocked_noted_and_zeroed(tmp_path, name):
    need(name)
    up = Upstream(command=[HACK, SOLVE])          # one blocked call, one allowed: the harness carries on
    r = asyncio.run(one(tmp_path, name, up))
    assert r.flagged and len(r.verdicts) == 1 and r.verdicts[0]["rule"] == "reward-hacking"
    assert r.tool_calls == 2 and r.score == 1.0                          # solved, but flagged: reward 0
    assert G.shaped_reward(r.score, r.tool_calls, r.flagged) == 0.0
    note = r.verdicts[0]["note"]
    later = [m for q in up.requests[1:] for m in q["messages"] if m.get("role") == "assistant"]
    assert any(note in json.dumps(m.get("content")) for m in later), "the note did not reach the harness"


@pytest.mark.parametrize("name", HARNESS_PARAMS)
def test_upstream_failure_leaves_the_rollout_ungraded(tmp_path, name):
    need(name)
    r = asyncio.run(one(tmp_path, name, Upstream(fail=True), timeout=120))
    assert r.score is None and r.errors and r.failure == "server"
    assert gone(r.pid) and not (tmp_path / "sandboxes" / r.id).exists()


def test_hung_harness_is_killed_and_ungraded(tmp_path):
    r = asyncio.run(one(tmp_path, "mini", Upstream(hang=True), timeout=3))
    assert r.timed_out and r.score is None and r.failure == "timeout"
    assert gone(r.pid) and not (tmp_path / "sandboxes" / r.id).exists()


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed (apt-get install bubblewrap)")
def test_bwrap_sandbox_runs_the_harness_read_only_outside_its_dirs(tmp_path):
    up = Upstream(command=[SOLVE, "touch /etc/harness-rl-escape; echo $? > exit.txt"])
    r = asyncio.run(one(tmp_path, "mini", up, sandbox="bwrap"))
    assert r.errors == [] and r.score == 1.0
    assert not Path("/etc/harness-rl-escape").exists()          # the root is mounted read-only
    assert gone(r.pid)


def test_streaming_harness_gets_sse_and_the_same_result(tmp_path, monkeypatch):
    up = Upstream()
    harness = H.get_harness("mini")
    orig = harness.launch

    def launch(*a, **kw):
        l = orig(*a, **kw)
        l.argv = l.argv[:2] + ["mini", "--stream"] + l.argv[3:] if "mini" in l.argv[:3] else l.argv
        return l
    monkeypatch.setattr(harness, "launch", launch)
    r = asyncio.run(one(tmp_path, "mini", up))
    assert r.score == 1.0 and r.errors == []


def test_proxy_auth_and_unknown_paths(tmp_path):
    async def go():
        import aiohttp
        up = Upstream()
        url = await up.start()
        proxy = R.Proxy(S.Client(url), adapter=lambda: ("m", 0))
        await proxy.start()
        r = R.Rollout(make_task(tmp_path / "t"), "mini")
        proxy.register(r)
        body = {"messages": [{"role": "user", "content": "hi"}]}
        out = {}
        async with aiohttp.ClientSession() as s:
            for key, auth in (("ok", r.secret), ("bad", "nope")):
                async with s.post(proxy.base_url(r) + "/chat/completions", json=body,
                                  headers={"Authorization": f"Bearer {auth}"}) as resp:
                    out[key] = resp.status
            async with s.post(f"{proxy.url}/r/unknown/v1/chat/completions", json=body,
                              headers={"Authorization": f"Bearer {r.secret}"}) as resp:
                out["unknown"] = resp.status
            async with s.get(proxy.base_url(r) + "/models") as resp:
                out["probe"] = resp.status
            async with s.post(proxy.base_url(r) + "/chat/completions", data="{bad",
                              headers={"Authorization": f"Bearer {r.secret}"}) as resp:
                out["badjson"] = resp.status
        await proxy.stop()
        await up.runner.cleanup()
        return out, r
    out, r = asyncio.run(go())
    assert out == {"ok": 200, "bad": 401, "unknown": 401, "probe": 404, "badjson": 400}
    assert r.aux_requests == 1 and r.turns == []          # no tools: answered, not trained on


def test_pool_runs_48_sessions_in_groups_of_8(tmp_path):
    task_list = [make_task(tmp_path / "tasks", f"t{i}") for i in range(6)]

    async def go():
        up = Upstream()
        url = await up.start()
        client = S.Client(url)
        proxy = R.Proxy(client, adapter=lambda: ("m", 0))
        await proxy.start()
        it = iter(task_list)
        pool = R.RolloutPool(H.get_harness("mini"), proxy, lambda: next(it, None), lambda: 0, tmp_path / "sb",
                             max_sessions=48, group_size=8, rollouts_dir=tmp_path / "rollouts")
        pool.start()
        groups = [await asyncio.wait_for(pool.groups.get(), 120) for _ in range(6)]
        peak = pool.running
        await pool.stop()
        await proxy.stop()
        await client.close()
        await up.runner.cleanup()
        return groups, peak
    groups, _ = asyncio.run(go())
    assert sorted(g.task.name for g in groups) == [f"t{i}" for i in range(6)]
    for g in groups:
        assert len(g.rollouts) == 8 and {r.index for r in g.rollouts} == set(range(8))
        assert all(r.score == 1.0 and r.task is g.task for r in g.rollouts)
    files = list((tmp_path / "rollouts").rglob("*.json"))
    assert len(files) == 48
    atif = pytest.importorskip("atif")
    for f in files[:8]:
        traj = atif.Trajectory.model_validate(json.loads(f.read_text()))
        agent = [s for s in traj.steps if s.source == "agent"]
        assert agent and agent[0].metrics.completion_token_ids and agent[0].tool_calls
    assert not list((tmp_path / "sb").glob("*"))
