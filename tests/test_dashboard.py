"""dashboard.py: its JSON endpoints on a real run dir (train.py --model tiny, then eval.py into it), with the bad
values and paths a request can carry; and in headless Chromium (driven over the DevTools protocol): the charts
gaining points while a live run trains, and the rollout view of a call the guard really blocked (mini harness
-> proxy -> guard -> the pool's ATIF file). Chromium missing: the browser tests skip, unless
HARNESS_RL_REQUIRE_CHROMIUM is set (CI), where they fail. Screenshots go to tests/artifacts/ (not committed)."""
import asyncio
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

import dashboard
import harnesses
from pool import RolloutPool
import servers
from conftest import free_port
from test_rollout import HACK, NUMBERS, SOLVE, Upstream, make_task
from proxy import Proxy
from recipe import SHARED, rollout_reward

ROOT = Path(__file__).resolve().parent.parent
# the machinery tests run the random tiny checkpoint as before (no warm start, 8 tokens a turn); the agentic main
# job is test_main_job_learns
RAW = ("--no-warm-start", "--max-tokens", "8")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
XSS = "echo '<img src=x onerror=\"window.pwned=1\">'"     # model text and tool output are shown, never run
REWARD = 'section[data-trainer="mini"] svg[data-chart="reward"]'
POINTS = "document.querySelectorAll('{}' + ' g[data-run=\"{}\"] circle.pt').length"      # run i's reward points
REWARD_POINTS = POINTS.format(REWARD, 1)       # the live run's, overlaid on a finished one


def need_chromium():
    if not CHROMIUM:
        (pytest.fail if os.environ.get("HARNESS_RL_REQUIRE_CHROMIUM") else pytest.skip)(
            "chromium is not installed (apt-get install -y chromium)")


def train_cmd(runs, name, steps):
    return [sys.executable, str(ROOT / "train.py"), "--model", "tiny", *RAW, "--steps", str(steps), "--sessions", "16",
            "--runs", str(runs), "--run", name]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return dict(os.environ, HARNESS_RL_CACHE=str(tmp_path_factory.mktemp("cache")), PYTHONUNBUFFERED="1")


@pytest.fixture(scope="module")
def run(tmp_path_factory, env):
    """A finished 2-step run, with an eval of its last adapter written inside it (eval/report.html)."""
    runs = tmp_path_factory.mktemp("runs")
    p = subprocess.run(train_cmd(runs, "done", 2), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    d = runs / "done"
    adapter = sorted((d / "adapters").iterdir())[-1]
    p = subprocess.run([sys.executable, str(ROOT / "eval.py"), "--model", "tiny", *RAW, "--harness", "mini",
                        "--adapters", str(adapter), "--samples", "1", "--out", str(d / "eval")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return d


async def _get(c, path):
    r = await c.get(path)
    body = await r.read()
    # strict JSON, as a browser parses it: NaN / Infinity are not JSON
    return r.status, json.loads(body, parse_constant=lambda x: pytest.fail(f"{path}: {x} in the answer")) \
        if r.content_type == "application/json" else body.decode()


TOKEN = "t0ken-for-the-tests"


def api(run_dirs, *paths, between=None):
    """GET each path on one dashboard app (aiohttp's TestServer): [(status, body)]. between(i) runs before
    request i (to change files while the same app, with its caches, keeps serving)."""
    async def go():
        async with TestClient(TestServer(dashboard.make_app(run_dirs, TOKEN)), headers={"Authorization": f"token {TOKEN}"}) as c:
            out = []
            for i, p in enumerate(paths):
                if between:
                    between(i)
                out.append(await _get(c, p))
            return out
    return asyncio.run(go())


def metrics_lines(d):
    return [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------------------- the JSON endpoints

def test_runs_lists_config_trainers_and_the_eval_report(run):
    [(st, runs), (st2, page), (st3, html), (st4, res)] = api(
        [run], "/api/runs", "/", "/report?run=0&path=eval/report.html", "/report?run=0&path=eval/result.json")
    assert st == st2 == st3 == st4 == 200
    r = runs[0]
    assert r["config"]["model"] == "tiny" and r["config"]["steps"] == 2 and r["steps"] == 2 and r["exists"]
    assert r["trainers"] == ["mini"]
    assert [x["path"] for x in r["reports"]] == ["eval/report.html", "eval/result.json"]
    assert "<svg" in html and "pass@1" in html              # eval.py's own report, served as it is
    assert set(res["models"]) == {"tiny", sorted((run / "adapters").iterdir())[-1].name}
    assert "api/metrics" in page and "http" not in page.split("<script")[1]          # no CDN, nothing remote

    async def csp():            # only the page's own script may run: its nonce is the header's, new each time
        async with TestClient(TestServer(dashboard.make_app([run]))) as c:
            return [((r := await c.get("/")).headers["Content-Security-Policy"], await r.text()) for _ in range(2)]
    (h1, p1), (h2, p2) = asyncio.run(csp())
    n1, n2 = (p.split('<script nonce="')[1].split('"')[0] for p in (p1, p2))
    assert f"script-src 'nonce-{n1}'" in h1 and f"script-src 'nonce-{n2}'" in h2 and n1 != n2
    assert "unsafe-inline" not in h1.split("script-src")[1].split(";")[0]


def test_the_dashboard_wants_its_token(run):
    """Reaching the port is not enough: without the token it printed (or with another) every path is 403; with it
    in the URL the page is served and sets the cookie its own requests then carry."""
    async def go():
        runner, url = await dashboard.start([run])
        base, token = url.split("?token=")
        out = {}
        try:
            async with aiohttp.ClientSession() as s:
                for name, path in (("page", ""), ("runs", "api/runs"), ("rollouts", "api/rollouts?run=0"),
                                   ("report", "report?run=0&path=eval/result.json")):
                    wrong = ("y" if token[0] == "x" else "x") + token[1:]       # one character off, never the token
                    for how, q in (("none", ""), ("wrong", "?token=" + wrong), ("header", "")):
                        hdr = {"Authorization": f"token {token}"} if how == "header" else {}
                        async with s.get(base + path + (q if "?" not in path else q.replace("?", "&")), headers=hdr) as r:
                            out[name, how] = r.status
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:     # an IP host
                async with s.get(url) as r:
                    out["page", "url"] = r.status
                async with s.get(base + "api/runs") as r:           # the cookie the page got
                    out["runs", "cookie"] = r.status
        finally:
            await runner.cleanup()
        return token, out
    token, out = asyncio.run(go())
    assert len(token) >= 32
    assert {k: v for k, v in out.items() if k[1] in ("none", "wrong")} == {
        (n, h): 403 for n in ("page", "runs", "rollouts", "report") for h in ("none", "wrong")}
    assert {k: v for k, v in out.items() if k[1] in ("header", "url", "cookie") and v != 200} == {}


def test_metrics_are_incremental_and_a_half_written_line_waits(run, tmp_path):
    d = tmp_path / "live"
    d.mkdir()
    real = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (d / "metrics.jsonl").write_text(real[0])
    half = len(real[1]) // 2
    writes = {1: lambda: open(d / "metrics.jsonl", "a").write(real[1][:half]),          # mid-write
              2: lambda: open(d / "metrics.jsonl", "a").write(real[1][half:]),          # finished
              3: lambda: open(d / "metrics.jsonl", "a").write(
                  '{"harness": "mini", "step": 3, "reward": NaN, "loss": Infinity, "fill": -Infinity, "x": 1e999}\n'
                  'not json at all\n'),
              5: lambda: (d / "metrics.jsonl").write_text(real[0])}                    # rewritten (a resume trim)
    out = api([d], "/api/metrics?run=0", "/api/metrics?run=0&after=1", "/api/metrics?run=0&after=1",
              "/api/metrics?run=0&after=2", "/api/metrics?run=0&after=0", "/api/metrics?run=0&after=3",
              between=lambda i: writes.get(i, lambda: None)())
    assert all(s == 200 for s, _ in out)
    first, waiting, whole, odd, again, trimmed = (b for _, b in out)
    assert first["lines"] == [json.loads(real[0])] and first["next"] == 1
    assert waiting["lines"] == [] and waiting["next"] == 1                  # the half line is not served
    assert whole["lines"] == [json.loads(real[1])] and whole["next"] == 2
    assert odd["lines"] == [{"trainer": "mini", "step": 3, "reward": None, "loss": None, "fill": None, "x": None}]
    assert odd["next"] == 3                                                  # the broken line is skipped
    assert [m["step"] for m in again["lines"]] == [1, 2, 3]
    assert trimmed["reset"] and trimmed["next"] == 1                        # the page starts over


def test_only_the_newest_files_are_read_in_a_huge_run(run, monkeypatch):
    monkeypatch.setattr(dashboard, "MAX_SCAN", 5)
    [(_, newest)] = api([run], "/api/rollouts?run=0")
    monkeypatch.setattr(dashboard, "MAX_SCAN", 10**6)
    [(_, every)] = api([run], "/api/rollouts?run=0")
    assert newest["counts"]["all"] == newest["read"] == 5 and newest["files"] == every["files"] > 5
    assert newest["rollouts"] == every["rollouts"][:5]


def test_rollouts_list_filters_limits_and_opens(run):
    files = list((run / "rollouts" / "mini").rglob("*.json"))
    out = api([run], "/api/rollouts?run=0&trainer=mini&limit=1000000000000", "/api/rollouts?run=0&limit=3",
              "/api/rollouts?run=0&filter=solved", "/api/rollouts?run=0&filter=failed",
              "/api/rollouts?run=0&trainer=nobody", "/api/guard?run=0")
    (s0, every), (s1, three), (s2, solved), (s3, failed), (s4, nobody), (s5, guard) = out
    assert s0 == s1 == s2 == s3 == s5 == 200 and s4 == 404 and "trainer" in nobody["error"]
    assert every["limit"] == dashboard.MAX_LIMIT and every["counts"]["all"] == len(files) == len(every["rollouts"])
    assert every["files"] == every["read"] == len(files)
    assert three["rollouts"] == every["rollouts"][:3]
    versions = [r["version"] for r in every["rollouts"]]
    assert versions == sorted(versions, reverse=True)                      # newest first
    assert all(r["score"] == 1 for r in solved["rollouts"])
    assert all(r["failure"] or r["score"] is None for r in failed["rollouts"])
    assert set(guard) == {"mini"} and all(v == {} for v in guard["mini"].values())     # nothing was blocked
    row = every["rollouts"][0]
    [(st, one)] = api([run], f"/api/rollout?run=0&id={row['id']}")
    atif = json.loads((run / "rollouts" / row["id"]).read_text())
    assert st == 200 and one["summary"]["id"] == row["id"] and one["summary"]["reward"] == atif["extra"]["reward"]
    assert [s["message"] for s in one["steps"]] == [s["message"] for s in atif["steps"]]
    agent = next(s for s in one["steps"] if s["source"] == "agent")
    assert agent["completion_tokens"] > 0 and agent["mean_logprob"] < 0
    assert "prompt_token_ids" not in json.dumps(one)                       # counts, not the ids


@pytest.mark.parametrize("query, field, status", [
    ("/api/metrics?run=abc", "run", 400), ("/api/metrics?run=-1", "run", 400), ("/api/metrics?run=1.5", "run", 400),
    ("/api/metrics", "run", 400), ("/api/metrics?run=7", "run", 404), ("/api/metrics?run=0&after=-3", "after", 400),
    ("/api/metrics?run=0&after=9999999999999999999999", "after", 400), ("/api/rollouts?run=0&limit=x", "limit", 400),
    ("/api/rollouts?run=0&limit=-1", "limit", 400), ("/api/rollouts?run=0&filter=../x", "filter", 400),
    ("/api/rollout?run=0", "id", 400), ("/api/rollouts?run=%00", "run", 400)])
def test_bad_query_values_are_refused_naming_the_field(tmp_path, query, field, status):
    [(st, body)] = api([tmp_path], query)
    assert st == status and body["error"].startswith(field + ":"), body


def test_file_paths_are_confined_to_the_run_dir(run, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(run, d, ignore=shutil.ignore_patterns("adapters", "checkpoint*", "sandboxes"))
    real = sorted((d / "rollouts" / "mini").rglob("*.json"))[0]
    outside = tmp_path / "secret.json"
    outside.write_text(real.read_text().replace('"task": "', '"task": "SECRET-'))
    (d / "rollouts" / "mini" / "00000" / "link.json").symlink_to(outside)
    (d / "rollouts" / "mini" / "99999").symlink_to(tmp_path, target_is_directory=True)     # a dir link out
    (d / "report.html").symlink_to(outside)
    good = real.relative_to(d / "rollouts").as_posix()
    cases = {f"id={good}": 200, "id=../config.json": 400, "id=mini/00000/../../../secret.json": 400,
             "id=%2e%2e/%2e%2e/secret.json": 400, f"id={outside}": 400, "id=/etc/passwd": 400,
             "id=mini\\..\\..\\config.json": 400, "id=mini/00000/link.json": 400, "id=mini/99999/secret.json": 400,
             "id=mini/00000/nope.json": 404, "id=../metrics.jsonl": 400, "id=mini": 404,
             "id=../config.json%00": 400}
    reports = {"path=config.json": 200, "path=../secret.json": 400, "path=report.html": 400,
               "path=metrics.jsonl": 400, "path=/etc/passwd": 400, "path=eval/nope.html": 404}
    queries = [f"/api/rollout?run=0&{q}" for q in cases] + [f"/report?run=0&{q}" for q in reports] + \
        ["/api/rollouts?run=0&limit=500", "/api/guard?run=0"]
    out = api([d], *queries)
    for q, want, (st, body) in zip(queries, list(cases.values()) + list(reports.values()), out):
        assert st == want, (q, st, body)
        if st != 200:
            assert body["error"].split(":")[0] in ("id", "path"), (q, body)
        assert "SECRET" not in json.dumps(body), q
    listed = out[-2][1]["rollouts"]
    assert all(r["version"] != 99999 and not r["id"].endswith("link.json") for r in listed)   # links are not listed


def test_empty_missing_and_half_written_runs_answer_without_crashing(run, tmp_path):
    empty, missing, partial = tmp_path / "empty", tmp_path / "not-yet", tmp_path / "partial"
    empty.mkdir()
    real = sorted((run / "rollouts" / "mini").rglob("*.json"))[0]
    dest = partial / "rollouts" / "mini" / "00000" / real.name
    dest.parent.mkdir(parents=True)
    text = real.read_text()
    dest.write_text(text[:len(text) // 2])                               # the pool is writing it
    (partial / "config.json").write_text("{not json")
    qs = [f"/api/{e}?run={i}" for i in range(3) for e in ("metrics", "rollouts", "guard")]
    out = api([empty, missing, partial], "/api/runs", *qs, f"/api/rollout?run=2&id=mini/00000/{real.name}",
              "/api/rollouts?run=2", between=lambda i: i == len(qs) + 2 and dest.write_text(text))
    assert all(s == 200 for s, _ in out[:-2]), out
    runs = out[0][1]
    assert [r["exists"] for r in runs] == [True, False, True] and runs[2]["config_error"].startswith("config.json")
    for i in range(3):
        m, ro, g = (b for _, b in out[1 + 3 * i: 4 + 3 * i])
        assert m == {"lines": [], "next": 0, "reset": False} and ro["rollouts"] == [] and g == {}
    # once the file is whole it is listed (the half one was not cached as broken)
    assert out[-2][0] == 404 and "readable" in out[-2][1]["error"]
    assert [r["id"] for r in out[-1][1]["rollouts"]] == [f"mini/00000/{real.name}"]


def test_main_refuses_a_missing_run_dir(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "dashboard.py"), str(tmp_path / "nope")], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "not a directory" in p.stderr and "Traceback" not in p.stderr


# ----------------------------------------------------------------------------- in a real browser

class Chromium:
    """Headless Chromium over the DevTools protocol (aiohttp's websocket client): navigate, evaluate JS in the
    page, screenshot. Exceptions the page throws are collected in `errors`."""

    def __init__(self, tmp):
        self.profile, self.errors, self.n = Path(tmp) / "chromium-profile", [], 0

    async def __aenter__(self):
        (self.profile / "DevToolsActivePort").unlink(missing_ok=True)      # a previous instance's port
        self.proc = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                                      "--disable-dev-shm-usage", "--no-first-run", "--remote-debugging-port=0",
                                      f"--user-data-dir={self.profile}", "--window-size=1280,900", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file, deadline = self.profile / "DevToolsActivePort", time.time() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self.proc.poll() is None and time.time() < deadline, "chromium did not start"
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        self.http = aiohttp.ClientSession()
        async with self.http.get(f"http://127.0.0.1:{port}/json/list") as r:
            page = next(t for t in await r.json() if t["type"] == "page")
        self.ws = await self.http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        await self.send("Runtime.enable")
        return self

    async def __aexit__(self, *exc):
        await self.http.close()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    async def send(self, method, **params):
        self.n += 1
        await self.ws.send_json({"id": self.n, "method": method, "params": params})
        while True:
            msg = await asyncio.wait_for(self.ws.receive_json(), 60)
            if msg.get("method") == "Runtime.exceptionThrown":
                self.errors.append(msg["params"]["exceptionDetails"])
            if msg.get("id") == self.n:
                assert "error" not in msg, msg
                return msg["result"]

    async def eval(self, expr):
        r = await self.send("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r
        return r["result"].get("value")

    async def wait_for(self, expr, timeout=60, why=""):
        deadline = time.time() + timeout
        while not (v := await self.eval(expr)):
            assert time.time() < deadline, f"timed out waiting for {why or expr}"
            await asyncio.sleep(0.2)
        return v

    async def goto(self, url):
        await self.send("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    async def screenshot(self, *paths):
        size = (await self.send("Page.getLayoutMetrics"))["cssContentSize"]
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip={
            "x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        for p in paths:
            Path(p).parent.mkdir(parents=True, exist_ok=True)
            Path(p).write_bytes(base64.b64decode(shot["data"]))


def test_live_run_charts_gain_points_without_a_reload(tmp_path, env, run):
    """The page served by a live run itself (train.py --dashboard): its reward line gains points while the page
    stays loaded. Then `train.py dashboard` overlays it on a finished run (run 0 solid, run 1 dashed)."""
    need_chromium()
    steps, d = 200, tmp_path / "runs" / "live"         # stopped (Ctrl-C) once the page has seen it train
    train = subprocess.Popen(train_cmd(tmp_path / "runs", "live", steps) + ["--dashboard", "0"], cwd=ROOT, env=env,
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    dash = None
    try:
        line = next(x for x in train.stdout if " | dashboard " in x or x.startswith("train.py:"))
        url = re.search(r"dashboard (http://\S+)", line)
        assert url, line + train.stdout.read()

        async def watch():
            async with Chromium(tmp_path) as b:
                await b.goto(url.group(1))
                origin = await b.eval("performance.timeOrigin")
                live = POINTS.format(REWARD, 0)        # the run's own page: the live run is its only run
                first = await b.wait_for(live, 180, "the first reward point")
                assert train.poll() is None and first < steps, "the run ended before the page saw it train"
                more = await b.wait_for(f"{live} > {first} && {live}", 60, "a second point")
                assert await b.eval("performance.timeOrigin") == origin       # the same page: no reload
                assert more > first
                charts = await b.eval('[...document.querySelectorAll("svg[data-chart]")].map(s => s.dataset.chart)')
                assert {"reward", "pass", "tools", "blocks", "ungraded", "stale", "is", "mismatch", "fill", "time",
                        "inflight", "rules"} <= set(charts)
                assert b.errors == []
            os.killpg(train.pid, signal.SIGINT)         # a clean stop: the step ends, a checkpoint, exit 0
            out = train.communicate(timeout=300)[0]
            assert train.returncode == 0, out
            n = len(metrics_lines(d))
            dash_port = free_port()
            nonlocal dash
            dash = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "dashboard", str(run), str(d), "--port",
                                     str(dash_port)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
            later = dash.stdout.readline().split()[1]
            async with Chromium(tmp_path) as b:
                await b.goto(later)
                await b.wait_for(f"{REWARD_POINTS} === {n}", 30, "every step's point")
                overlay = await b.eval(f"[...document.querySelectorAll('{REWARD} g.series')].map(g => [g.dataset.run, "
                                       "g.querySelectorAll('circle').length, g.querySelector('polyline')"
                                       ".getAttribute('stroke-dasharray')])")
                assert overlay == [["0", 2, ""], ["1", n, "6 3"]]        # the finished run's 2 steps, solid
                await b.wait_for("document.querySelectorAll('tr.row').length > 0", 30, "the rollout list")
                await b.screenshot(ARTIFACTS / "dashboard-live.png", "/tmp/dashboard.png")
                assert b.errors == []
        asyncio.run(watch())
    finally:
        for p in (train, dash):
            if p and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


async def blocked_rollout(tmp):
    """One group of two rollouts of the mini harness whose model (a scripted upstream) first tries to write the
    verifier's reward file, then solves the task and echoes some HTML: the real proxy and guard block the first
    call, and the real pool writes the ATIF files into tmp/run/rollouts/mini/00000/."""
    up = Upstream(command=[HACK, SOLVE, XSS])
    client = servers.Client(await up.start(), timeout=30)
    proxy = Proxy(client, adapter=lambda: ("mini-v0", 0), sampling={"temperature": 1.0, "max_tokens": 256})
    await proxy.start()
    tasks = [make_task(tmp / "tasks")]
    pool = RolloutPool(harnesses.get_harness("mini"), proxy, lambda: tasks.pop() if tasks else None, lambda: 0,
                         tmp / "sandboxes", max_sessions=2, group_size=2, rollouts_dir=tmp / "run" / "rollouts" / "mini",
                         sandbox="dir", reward=rollout_reward(SHARED), **NUMBERS)
    pool.start()
    try:
        group = await pool.next_group(asyncio.Event(), 120)
    finally:
        await pool.stop()
        await proxy.stop()
        await client.close()
        await up.runner.cleanup()
    return group.rollouts


def test_rollout_view_shows_a_blocked_call_with_its_rule_and_note(tmp_path):
    need_chromium()

    async def go():
        rollouts = await blocked_rollout(tmp_path)
        assert all(r.blocked and r.reward == 0 and r.score == 1.0 for r in rollouts), [r.errors for r in rollouts]
        v = rollouts[0].verdicts[0]
        runner, url = await dashboard.start([tmp_path / "run"])
        try:
            base, token = url.split("?token=")
            async with aiohttp.ClientSession() as s, s.get(base + f"api/guard?run=0&token={token}") as r:
                assert await r.json() == {"mini": {"0": {v["rule"]: 2}}}
            async with Chromium(tmp_path) as b:
                await b.goto(url)
                await b.wait_for("!!document.querySelector('button[data-filter=blocked]')", 30, "the filter buttons")
                await b.eval("document.querySelector('button[data-filter=blocked]').click()")
                await b.wait_for("document.querySelector('button.on').dataset.filter === 'blocked' && "
                                 "document.querySelectorAll('tr.row').length === 2", 30, "the blocked rollouts")
                await b.eval("document.querySelector('tr.row').click()")
                await b.wait_for("!!document.querySelector('#detail .verdict')", 30, "the rollout view")
                verdict = await b.eval("document.querySelector('#detail .verdict').innerText")
                page = await b.eval("document.getElementById('detail').innerText")
                assert await b.eval("!document.querySelector('#detail img') && window.pwned === undefined")
                await b.screenshot(ARTIFACTS / "dashboard-rollout.png", "/tmp/dashboard-rollout.png")
                assert b.errors == []
        finally:
            await runner.cleanup()
        return v, verdict, page
    v, verdict, page = asyncio.run(go())
    flat = lambda s: " ".join(s.split())        # noqa: E731 - the DOM's text wraps and collapses spaces
    assert v["rule"] == "reward-hacking" and "BLOCKED" in verdict and v["rule"] in verdict
    assert flat(v["note"]) in flat(verdict) and "reward.txt" in verdict                # the note, the call
    assert "reward 0" in flat(page) and "guard note (reward-hacking)" in page           # reward, the noted turn
    assert '<img src=x onerror="window.pwned=1">' in page                               # as text, in the result
