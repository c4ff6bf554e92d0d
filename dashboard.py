"""The live dashboard: a run's metrics as charts that grow while it trains, and a browser of its rollouts.

    python dashboard.py runs/a [runs/b ...] [--host 127.0.0.1] [--port 8765]     # finished or live runs
    python train.py --model tiny --dashboard                # train.py runs this file as a process of its own

One aiohttp app, one HTML page with its CSS and JS inline (no CDN, works offline); the charts are SVG drawn
by hand in plain JS. The page polls every 2 s: `/api/metrics?after=N` returns only the lines it has not seen,
so the charts gain points without a reload. Per trainer (adapter): reward, pass rate, tool calls, guard
blocks (per step, and by rule per adapter version - rule names live only in the ATIF files), ungraded by
reason, stale drops, importance weight / cut / truncated share, mismatch, packing fill, step time
(wait / train / sync), sessions in flight, loss. Several run dirs are overlaid (one dash style per run).
The rollout browser lists the newest rollouts per trainer (all / blocked / failed / solved); one opens to
its turns, tool calls and results, the guard's verdicts (rule + note) and its reward. Eval reports
(`report.html`, `result.json`) found in a run dir are linked; an eval output dir works as a "run" too.

Everything a request names is checked: run index and numbers are non-negative integers (400 naming the
field), a file path must stay inside the run dir (no absolute path, no `..`, no symlink out: 400; missing:
404), every error is a JSON {"error": ...}. Files are read on two threads of the dashboard's own (its event loop
never waits on the disk), and once each: metrics from the last complete line on (a half-written last line waits for
the next poll), rollout files once per (mtime, size). NaN / Infinity in a file become null.

Every request needs the token in the URL it prints (fresh per start, as Jupyter's; the page then keeps it in an
HttpOnly, SameSite=Strict cookie): reaching the port is not enough (a public task's agent, another user).

Left out: accounts and TLS (it binds loopback by default), push (websockets), rollouts older than the newest
MAX_SCAN files of a run (the list, its counts and the by-rule chart cover those), pagination past MAX_LIMIT rows,
editing or deleting anything.
"""
from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import math
import os
import re
import secrets
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

from aiohttp import web

MAX_LIMIT = 500                 # rollouts per list answer; a larger ?limit= is clamped to it
MAX_SCAN = 5000                 # newest rollout files read per run (each holds its token ids: ~10-200 kB)
FILTERS = ("all", "blocked", "failed", "solved")
REPORTS = ("report.html", "result.json", "report.md")     # what eval.py writes
SKIP = {"rollouts", "adapters", "checkpoint", "checkpoint.tmp", "checkpoint.prev", "sandboxes"}   # big, no reports
COOKIE = "harness_rl_token"
RENAMED = {"harness": "trainer", "guard_blocks": "blocked"}     # metrics keys of runs written before the rename
PAGE_CSP = "default-src 'self'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; img-src data:"


# ----------------------------------------------------------------------------- reading a run dir

def loads(text):
    """json.loads, but NaN / Infinity / 1e999 become None: the answer must be JSON a browser can parse."""
    def num(s):
        v = float(s)
        return v if math.isfinite(v) else None
    return json.loads(text, parse_constant=lambda _: None, parse_float=num)


def _dirs(path):
    """Sub-directories, sorted, never through a symlink (rollout.py writes none; one could point anywhere)."""
    try:
        return sorted((e for e in os.scandir(path) if e.is_dir(follow_symlinks=False)), key=lambda e: e.name)
    except OSError:
        return []


def summarize(atif, rel):
    """An ATIF trajectory (rollout.to_atif) -> the row the rollout list shows."""
    x = atif.get("extra") or {}
    trainer, folder, _ = rel.split("/")
    verdicts = [v for v in x.get("verdicts") or [] if isinstance(v, dict)]
    return {"id": rel, "trainer": trainer, "version": int(folder) if folder.isdigit() else folder,
            "session": atif.get("session_id"), "task": x.get("task"), "reward": x.get("reward"),
            "score": x.get("score"), "tool_calls": x.get("tool_calls"), "blocked": bool(verdicts),
            "rules": [str(v.get("rule")) for v in verdicts], "failure": x.get("failure") or "",
            "reason": x.get("reason") or "", "start_version": x.get("start_version"), "seconds": x.get("seconds"),
            "turns": sum(s.get("source") == "agent" for s in atif.get("steps") or [] if isinstance(s, dict))}


def keep(s, flt):
    """Whether a rollout row passes a list filter: blocked = a guard verdict; failed = ungraded (no score);
    solved = full pass (score 1), blocked or not (its reward says which)."""
    return flt == "all" or (flt == "blocked" and s["blocked"]) or \
        (flt == "failed" and (s["failure"] or s["score"] is None)) or (flt == "solved" and s["score"] == 1)


class Run:
    """One run directory, read incrementally: metrics lines parsed once each, rollout files once per change.
    Methods run in worker threads, one at a time per run (the lock)."""

    def __init__(self, path):
        self.path = Path(path).resolve()
        self.lock = threading.Lock()
        self.metrics, self.offset, self.tail = [], 0, b""
        self.files = {}             # "trainer/version/file.json" -> ((mtime_ns, size), row or None)
        self.total = 0              # rollout files found (only the newest MAX_SCAN are read)

    def read_metrics(self):
        """Every whole metrics line so far (dicts). A line without its newline is being written: it waits for
        the next call. A file rewritten from the start (resume trims it) is read again from the top."""
        try:
            with open(self.path / "metrics.jsonl", "rb") as f:
                if self.offset:          # still the same file up to where we stopped? (compare the last line)
                    f.seek(max(0, self.offset - len(self.tail)))
                    if f.read(len(self.tail)) != self.tail:
                        self.metrics, self.offset, self.tail = [], 0, b""
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            self.metrics, self.offset, self.tail = [], 0, b""
            return self.metrics
        whole = data[:data.rfind(b"\n") + 1]
        for line in whole.splitlines():
            try:
                m = loads(line)
            except (ValueError, UnicodeDecodeError):     # a corrupt line (a crash mid-write, then more lines)
                continue
            if isinstance(m, dict):
                self.metrics.append({RENAMED.get(k, k): v for k, v in m.items()})
        if whole:
            self.offset += len(whole)
            self.tail = whole[-256:]
        return self.metrics

    def rollouts(self):
        """Rows of the newest MAX_SCAN readable ATIF files under rollouts/<trainer>/<version>/, newest first (by
        version folder, then time). A file still being written (not yet valid JSON) is skipped now and read
        again once it changes; a row is parsed once per (mtime, size)."""
        found = []
        for t in _dirs(self.path / "rollouts"):
            for v in _dirs(t.path):
                try:
                    entries = [e for e in os.scandir(v.path) if e.name.endswith(".json")
                               and e.is_file(follow_symlinks=False)]
                except OSError:
                    continue
                for e in entries:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    version = int(v.name) if v.name.isdigit() else -1
                    found.append(((version, st.st_mtime), f"{t.name}/{v.name}/{e.name}", e.path, st))
        found.sort(key=lambda f: f[0], reverse=True)
        self.total, seen = len(found), {}
        for _, rel, path, st in found[:MAX_SCAN]:
            key, old = (st.st_mtime_ns, st.st_size), self.files.get(rel)
            if old and old[0] == key:
                seen[rel] = old
                continue
            try:
                atif = loads(Path(path).read_bytes())
                row = {**summarize(atif, rel), "mtime": st.st_mtime} if isinstance(atif, dict) else None
            except (OSError, ValueError, UnicodeDecodeError, AttributeError, TypeError):
                row = None
            seen[rel] = (key, row)
        self.files = seen
        return [r for _, r in seen.values() if r]

    def trainers(self):
        return sorted({e.name for e in _dirs(self.path / "rollouts")} |
                      {m["trainer"] for m in self.metrics if isinstance(m.get("trainer"), str)})

    def reports(self):
        """Eval reports (eval.py's files) in the run dir, up to 3 levels down, skipping the bulky folders."""
        out = []
        for d, subdirs, files in os.walk(self.path):
            rel = Path(d).relative_to(self.path)
            subdirs[:] = [] if len(rel.parts) >= 3 else sorted(s for s in subdirs if s not in SKIP)
            out += [(rel / f).as_posix() for f in REPORTS if f in files]
        return sorted(out)

    def info(self, i):
        cfg, err = {}, None
        try:
            cfg = loads((self.path / "config.json").read_text())
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            err = f"config.json: {e}"
        self.read_metrics()
        return {"id": i, "name": self.path.name, "path": str(self.path), "exists": self.path.is_dir(),
                "config": cfg if isinstance(cfg, dict) else {}, "config_error": err, "steps": len(self.metrics),
                "trainers": self.trainers(),
                "reports": [{"path": p, "url": f"report?run={i}&path={p}"} for p in self.reports()]}


def detail(atif, rel):
    """One trajectory for the rollout view: its steps without token ids / logprobs (counts instead), tool calls,
    results, and the guard's verdicts, each tied to the step whose message carries its note."""
    x = atif.get("extra") or {}
    verdicts = []
    for v in (v for v in x.get("verdicts") or [] if isinstance(v, dict)):
        call = v.get("call") if isinstance(v.get("call"), dict) else {}
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        verdicts.append({"rule": v.get("rule"), "note": v.get("note"), "tool": fn.get("name"),
                         "arguments": fn.get("arguments")})
    steps = []
    for s in (s for s in atif.get("steps") or [] if isinstance(s, dict)):
        met = s.get("metrics") or {}
        lps = [p for p in met.get("logprobs") or [] if isinstance(p, (int, float))]
        msg = s.get("message") if isinstance(s.get("message"), str) else json.dumps(s.get("message"))
        steps.append({"step_id": s.get("step_id"), "source": s.get("source"), "message": msg,
                      "tool_calls": s.get("tool_calls") or [],
                      "results": (s.get("observation") or {}).get("results") or [],
                      "prompt_tokens": met.get("prompt_tokens"), "completion_tokens": met.get("completion_tokens"),
                      "mean_logprob": sum(lps) / len(lps) if lps else None,
                      "adapter_version": (met.get("extra") or {}).get("adapter_version"),
                      "blocked": [i for i, v in enumerate(verdicts) if v["note"] and v["note"] in (msg or "")]})
    return {"id": rel, "summary": summarize(atif, rel), "agent": atif.get("agent", {}).get("name"),
            "harness_version": atif.get("agent", {}).get("version"), "steps": steps, "verdicts": verdicts,
            "errors": x.get("errors") or [], "exit_code": x.get("exit_code"), "timed_out": x.get("timed_out")}


# ----------------------------------------------------------------------------- request checks

def fail(status, msg):
    raise {400: web.HTTPBadRequest, 403: web.HTTPForbidden,
           404: web.HTTPNotFound}[status](text=json.dumps({"error": msg}), content_type="application/json")


def int_arg(request, name, default=None):
    """A non-negative integer query value; missing -> default (or 400 when there is none)."""
    v = request.query.get(name)
    if v is None:
        if default is None:
            fail(400, f"{name}: required (a non-negative integer)")
        return default
    if not re.fullmatch(r"\d{1,18}", v):
        fail(400, f"{name}: expected a non-negative integer, got {v[:40]!r}")
    return int(v)


def confine(root, base, rel, field):
    """base/rel as a real file inside root, or a 400 (absolute, '..', a symlink that leads out) / 404."""
    if not rel or "\x00" in rel or "\\" in rel or len(rel) > 1000:
        fail(400, f"{field}: expected a relative path inside the run directory")
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts:
        fail(400, f"{field}: {rel[:200]!r} is not inside the run directory (absolute or '..')")
    try:
        real = (base / p).resolve(strict=True)
    except (OSError, RuntimeError):         # missing, or a symlink loop
        fail(404, f"{field}: no such file {rel[:200]!r} in the run directory")
    if not real.is_relative_to(root):
        fail(400, f"{field}: {rel[:200]!r} leads out of the run directory (a symlink)")
    if not real.is_file():
        fail(404, f"{field}: {rel[:200]!r} is not a file")
    return real


# ----------------------------------------------------------------------------- the app

def make_app(run_dirs, token=None):
    """The dashboard for these run directories (they may not exist yet: a run about to start). `token`: every request
    carries it (?token=, the page's cookie, or `Authorization: token T`); None: open (endpoint tests only)."""
    runs = [Run(d) for d in run_dirs]

    @web.middleware
    async def auth(request, handler):
        given = (request.query.get("token") or request.cookies.get(COOKIE)
                 or request.headers.get("Authorization", "").removeprefix("token "))
        if token and not hmac.compare_digest(given.encode(), token.encode()):
            fail(403, "token: missing or wrong (the URL the dashboard printed carries it)")
        response = await handler(request)
        if token and request.query.get("token"):        # the page's own requests then carry it as a cookie
            response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
        return response
    app = web.Application(middlewares=[auth])
    # its own threads for the disk: inside train.py, the default executor runs the optimizer and the verifiers
    disk = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dashboard")

    app.on_cleanup.append(lambda app: asyncio.to_thread(disk.shutdown, wait=False, cancel_futures=True))

    def off_loop(fn, *a):
        return asyncio.get_running_loop().run_in_executor(disk, fn, *a)

    def run_of(request):
        i = int_arg(request, "run")
        if i >= len(runs):
            fail(404, f"run: no run {i} (there are {len(runs)})")
        return i, runs[i]

    async def locked(run, fn, *a):
        def go():
            with run.lock:
                return fn(*a)
        return await off_loop(go)

    async def index(request):
        # only the page's own script runs: a nonce, not 'unsafe-inline', so model text that slipped past esc() can't
        nonce = secrets.token_urlsafe(16)
        return web.Response(text=PAGE.replace("<script>", f'<script nonce="{nonce}">'), content_type="text/html",
                            headers={"Content-Security-Policy": PAGE_CSP.format(nonce=nonce)})

    async def api_runs(request):
        return web.json_response([await locked(r, r.info, i) for i, r in enumerate(runs)])

    async def api_metrics(request):
        _, run = run_of(request)
        after = int_arg(request, "after", 0)
        lines = await locked(run, lambda: list(run.read_metrics()))
        # after > what exists: the file was rewritten (a resume trimmed it); the page starts over
        return web.json_response({"lines": lines[after:], "next": len(lines), "reset": after > len(lines)})

    async def api_rollouts(request):
        _, run = run_of(request)
        flt = request.query.get("filter", "all")
        if flt not in FILTERS:
            fail(400, f"filter: expected one of {', '.join(FILTERS)}, got {flt[:40]!r}")
        limit = min(int_arg(request, "limit", 50), MAX_LIMIT)
        trainer = request.query.get("trainer")
        rows = await locked(run, run.rollouts)
        if trainer is not None:
            if trainer not in {r["trainer"] for r in rows} | set(await locked(run, run.trainers)):
                fail(404, f"trainer: no trainer {trainer[:100]!r} in this run")
            rows = [r for r in rows if r["trainer"] == trainer]
        counts = {f: sum(keep(r, f) for r in rows) for f in FILTERS}
        return web.json_response({"rollouts": [r for r in rows if keep(r, flt)][:limit], "counts": counts,
                                  "limit": limit, "files": run.total, "read": min(run.total, MAX_SCAN)})

    async def api_rollout(request):
        _, run = run_of(request)
        rel = request.query.get("id", "")
        path = confine(run.path, run.path / "rollouts", rel, "id")
        p = PurePosixPath(rel)
        if len(p.parts) != 3 or p.suffix != ".json":
            fail(400, "id: expected <trainer>/<version>/<file>.json (an id from /api/rollouts)")
        try:
            atif = loads(await off_loop(path.read_bytes))
            assert isinstance(atif, dict)
            return web.json_response(detail(atif, p.as_posix()))
        except (ValueError, UnicodeDecodeError, AssertionError, AttributeError, TypeError):
            fail(404, f"id: {rel[:200]!r} is not a readable trajectory (still being written?)")

    async def api_guard(request):
        """Blocked calls per trainer, adapter version and rule, from the ATIF files' verdicts."""
        _, run = run_of(request)
        out = {}
        for r in await locked(run, run.rollouts):
            per = out.setdefault(r["trainer"], {}).setdefault(str(r["version"]), {})
            for rule in r["rules"]:
                per[rule] = per.get(rule, 0) + 1
        return web.json_response(out)

    async def report(request):
        _, run = run_of(request)
        path = confine(run.path, run.path, request.query.get("path", ""), "path")
        types = {".html": "text/html", ".json": "application/json", ".md": "text/plain"}
        if path.suffix not in types:
            fail(400, f"path: only eval reports are served ({', '.join(types)} files)")
        return web.Response(body=await off_loop(path.read_bytes), content_type=types[path.suffix],
                            charset="utf-8", headers={"Content-Security-Policy": "default-src 'none'; "
                                                      "style-src 'unsafe-inline'; img-src data:"})

    for path, handler in (("/", index), ("/api/runs", api_runs), ("/api/metrics", api_metrics), ("/report", report),
                          ("/api/rollouts", api_rollouts), ("/api/rollout", api_rollout), ("/api/guard", api_guard)):
        app.router.add_get(path, handler)
    return app


async def start(run_dirs, host="127.0.0.1", port=0, token=None):
    """Serve the dashboard on the running event loop: (AppRunner, url with ?token=, as Jupyter prints it). The
    caller ends it with `await runner.cleanup()`. port 0 = any free port (the url says which); token: a fresh one."""
    token = token or secrets.token_urlsafe(24)
    runner = web.AppRunner(make_app(run_dirs, token), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    h, p = runner.addresses[0][:2]
    return runner, f"http://{f'[{h}]' if ':' in h else h}:{p}/?token={token}"


def main(argv=None):
    ap = argparse.ArgumentParser(description="Serve the live dashboard of finished or running training runs.")
    ap.add_argument("runs", nargs="+", help="run directories (runs/<name>, or an eval.py output dir); several "
                                            "are overlaid on the same charts")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, this machine "
                                                         "only; 0.0.0.0 exposes the runs to the network)")
    ap.add_argument("--port", type=int, default=8765, help="port to bind, 0 = any free one (default: %(default)s)")
    args = ap.parse_args(argv)
    missing = [d for d in args.runs if not Path(d).is_dir()]
    if missing:
        ap.error(f"not a directory: {', '.join(missing)}")

    async def serve():
        runner, url = await start(args.runs, args.host, args.port)
        print(f"dashboard {url} ({len(args.runs)} run{'s' * (len(args.runs) > 1)}; Ctrl-C stops it)", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    except OSError as e:                # the port is taken, the host is not ours
        sys.exit(f"dashboard: cannot listen on {args.host}:{args.port}: {e.strerror or e}")


# ----------------------------------------------------------------------------- the page (HTML, CSS, JS)

PAGE = r"""<!doctype html><html><head><meta charset="utf-8"><title>harness-rl dashboard</title>
<style>
body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222;background:#fafafa}h1{font-size:18px;margin:0 0 8px}
h2{font-size:15px;margin:18px 0 6px}.muted{color:#777}.bad{color:#b00020}.good{color:#087f23}code{background:#eee}
.run,.card,.step{background:#fff;border:1px solid #ddd;border-radius:4px;padding:4px 8px;margin:4px 0}
.grid{display:flex;flex-wrap:wrap;gap:8px}.card svg text{font-size:10px;fill:#555}.card svg .t{font-size:12px;fill:#222}
.legend{font-size:11px;max-width:360px}.legend span{margin-right:8px;white-space:nowrap}
button{font:inherit;padding:2px 8px;border:1px solid #bbb;background:#fff;border-radius:3px}button.on{background:#333;color:#fff}
.rb{display:flex;gap:12px;align-items:flex-start}.rbl{flex:0 0 600px;max-height:640px;overflow:auto}#detail{flex:1;min-width:0}
table{border-collapse:collapse;width:100%;background:#fff}td,th{padding:3px 6px;border-bottom:1px solid #eee;text-align:left}
tr.row{cursor:pointer}tr.row:hover,tr.sel{background:#eef3ff}.step.blockedstep{border-color:#b00020}.src{font-weight:600}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0;background:#f4f4f4;padding:4px;max-height:300px;overflow:auto}
.verdict{border-left:4px solid #b00020;background:#fff0f0;padding:6px;margin:6px 0}
</style></head><body>
<h1>harness-rl dashboard</h1><div id="err" class="bad"></div><div id="runs" class="muted">loading…</div>
<div id="panels"></div>
<h2>Rollouts</h2>
<div><select id="rbsel"></select> <span id="rbf"></span> <span id="rbcount" class="muted"></span></div>
<div class="rb"><div class="rbl"><table id="rblist"></table></div><div id="detail" class="muted">click a rollout</div></div>
<script>
"use strict";
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const DASHES = ["", "6 3", "2 3", "8 3 2 3"], DASH_NAMES = ["solid", "dashed", "dotted", "dash-dot"];  // per run
// [id, title, line -> {series: value}, fill missing series with 0]
const CHARTS = [
  ["reward", "reward", m => ({reward: m.reward})],
  ["pass", "pass rate", m => ({"pass rate": m.pass_rate})],
  ["tools", "tool calls per rollout", m => ({"tool calls": m.tool_calls})],
  ["blocks", "guard blocks (rollouts with a blocked call)", m => ({blocked: m.blocked})],
  ["ungraded", "ungraded rollouts by reason", m => Object.assign({total: m.ungraded}, m.ungraded_by || {}), true],
  ["stale", "rollouts dropped as stale", m => ({stale: m.dropped_stale})],
  ["is", "importance weight w / cut / trunc share", m => ({w: m.is_weight, cut: m.clip_frac, trunc: m.trunc_frac})],
  ["mismatch", "mismatch |log π − log μ| (fresh tokens)", m => ({mismatch: m.mismatch})],
  ["fill", "packing fill (tokens / budget)", m => ({fill: m.fill})],
  ["time", "step time split (s)", m => ({wait: m.wait_time, train: m.train_time, sync: m.sync_time})],
  ["inflight", "sessions in flight", m => ({"in flight": m.in_flight})],
  ["loss", "loss", m => ({loss: m.loss})],
];
const S = {runs: [], lines: {}, after: {}, guard: {}, filter: "all", sel: null, open: null, tick: 0};
const esc = s => String(s ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[c]);
const num = v => typeof v === "number" && isFinite(v);
const fmt = v => !num(v) ? "–" : v === 0 ? "0" : Math.abs(v) >= 1000 ? v.toFixed(0) : Math.abs(v) >= 0.01 ? String(+v.toFixed(3)) : v.toExponential(1);
async function get(url) {
  const r = await fetch(url), d = await r.json();
  if (!r.ok) throw new Error(d.error || r.status);
  return d;
}
// ---- charts: one SVG per metric; series = (run, key); color per key (or per run if one key), dash per run
function chart(id, title, series, xlabel, empty = "no data yet") {
  const W = 360, H = 170, L = 46, R = 10, T = 22, B = 26, pts = series.flatMap(s => s.pts);
  let svg = `<svg width="${W}" height="${H}" data-chart="${id}"><text class="t" x="4" y="14">${esc(title)}</text>`;
  if (!pts.length) return `<div class="card">${svg}<text x="${W / 2}" y="${H / 2}" text-anchor="middle">${esc(empty)}</text></svg></div>`;
  let [x0, x1] = [Math.min(...pts.map(p => p[0])), Math.max(...pts.map(p => p[0]))];
  let [y0, y1] = [Math.min(0, ...pts.map(p => p[1])), Math.max(...pts.map(p => p[1]))];
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) y1 = y0 + 1;
  const X = x => L + (x - x0) / (x1 - x0) * (W - L - R), Y = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  svg += `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#999"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#999"/>`;
  for (const y of [y0, (y0 + y1) / 2, y1])
    svg += `<text x="${L - 4}" y="${Y(y) + 3}" text-anchor="end">${fmt(y)}</text><line x1="${L}" x2="${W - R}" y1="${Y(y)}" y2="${Y(y)}" stroke="#eee"/>`;
  svg += `<text x="${L}" y="${H - 8}">${fmt(x0)}</text><text x="${W - R}" y="${H - 8}" text-anchor="end">${fmt(x1)}</text>`;
  svg += `<text x="${(L + W) / 2}" y="${H - 8}" text-anchor="middle">${esc(xlabel)}</text>`;
  for (const s of series) {
    if (!s.pts.length) continue;
    const xy = s.pts.map(p => [X(p[0]).toFixed(1), Y(p[1]).toFixed(1)]);
    svg += `<g class="series" data-run="${s.run}" data-key="${esc(s.key)}"><polyline fill="none" stroke="${s.color}" ` +
      `stroke-width="1.5" stroke-dasharray="${s.dash}" points="${xy.map(q => q.join(",")).join(" ")}"/>`;
    s.pts.forEach((p, i) => svg += `<circle class="pt" cx="${xy[i][0]}" cy="${xy[i][1]}" r="2.2" fill="${s.color}">` +
      `<title>${esc(s.name)} ${esc(xlabel)} ${p[0]}: ${fmt(p[1])}</title></circle>`);
    svg += "</g>";
  }
  const legend = series.map(s => `<span><svg width="16" height="6"><line x1="0" y1="3" x2="16" y2="3" stroke="${s.color}" ` +
    `stroke-width="2" stroke-dasharray="${s.dash}"/></svg> ${esc(s.name)}</span>`).join("");
  return `<div class="card">${svg}</svg><div class="legend">${legend}</div></div>`;
}
function seriesOf(trainer, pick, zeros) {
  const out = [], runs = S.runs.filter(r => (S.lines[r.id] || []).some(m => m.trainer === trainer));
  runs.forEach((run, ri) => {
    const ms = S.lines[run.id].filter(m => m.trainer === trainer), keys = [];
    for (const m of ms) for (const k of Object.keys(pick(m))) if (!keys.includes(k)) keys.push(k);
    keys.forEach((k, ki) => out.push({run: run.id, key: k,
      name: (runs.length > 1 ? run.name + " " : "") + k, dash: DASHES[S.runs.indexOf(run) % DASHES.length],
      color: keys.length > 1 ? COLORS[ki % COLORS.length] : COLORS[S.runs.indexOf(run) % COLORS.length],
      pts: ms.map(m => [m.step, zeros ? (pick(m)[k] ?? 0) : pick(m)[k]]).filter(p => num(p[1]))}));
  });
  return out;
}
function guardSeries(trainer) {        // blocked calls by rule, x = adapter version (ATIF folders)
  const out = [];
  S.runs.forEach((run, ri) => {
    const per = (S.guard[run.id] || {})[trainer] || {}, rules = [...new Set(Object.values(per).flatMap(Object.keys))].sort();
    const vs = Object.keys(per).filter(v => /^\d+$/.test(v)).map(Number).sort((a, b) => a - b);
    rules.forEach((rule, k) => out.push({run: run.id, key: rule, name: (S.runs.length > 1 ? run.name + " " : "") + rule,
      color: COLORS[k % COLORS.length], dash: DASHES[ri % DASHES.length], pts: vs.map(v => [v, per[v][rule] || 0])}));
  });
  return out;
}
function draw() {
  const trainers = [...new Set(S.runs.flatMap(r => (S.lines[r.id] || []).map(m => m.trainer)))].sort();
  document.getElementById("panels").innerHTML = trainers.map(t =>
    `<section data-trainer="${esc(t)}"><h2>${esc(t)}</h2><div class="grid">` +
    CHARTS.map(([id, title, pick, zeros]) => chart(id, title, seriesOf(t, pick, zeros), "step")).join("") +
    chart("rules", "blocked calls by guard rule", guardSeries(t), "adapter version", "no blocked call") +
    `</div></section>`).join("")
    || `<p class="muted">no metrics yet (a step writes one line to metrics.jsonl when it ends)</p>`;
}
function drawRuns() {
  const keys = ["model", "harness", "loss", "lr", "rank", "steps", "sessions", "group_size", "token_budget", "suite",
                "server", "seed"];
  document.getElementById("runs").innerHTML = S.runs.map((r, i) => {
    const cfg = keys.filter(k => r.config[k] !== undefined).map(k => `${k} <b>${esc(r.config[k])}</b>`).join(" · ");
    const reps = r.reports.map(p => `<a href="${esc(p.url)}" target="_blank">${esc(p.path)}</a>`).join(" ");
    return `<div class="run"><b>${esc(r.name)}</b> <span class="muted">${esc(r.path)} · ${DASH_NAMES[i % DASHES.length]} ` +
      `lines · ${(S.lines[r.id] || []).length} steps logged</span><br>${cfg || '<span class="muted">no config.json yet</span>'}` +
      (r.config_error ? ` <span class="bad">${esc(r.config_error)}</span>` : "") + (reps ? `<br>eval reports: ${reps}` : "") + `</div>`;
  }).join("");
  const sel = document.getElementById("rbsel");
  const opts = S.runs.flatMap(r => r.trainers.map(t => [`${r.id}|${t}`, (S.runs.length > 1 ? r.name + " / " : "") + t]));
  if (sel.options.length !== opts.length) {
    sel.innerHTML = opts.map(([v, l]) => `<option value="${esc(v)}">${esc(l)}</option>`).join("");
    if (S.sel && opts.some(o => o[0] === S.sel)) sel.value = S.sel;
    S.sel = sel.value || null;
  }
}
// ---- the rollout browser
async function listRollouts() {
  if (!S.sel) return;
  const [run, trainer] = [S.sel.split("|")[0], S.sel.slice(S.sel.indexOf("|") + 1)];
  const d = await get(`api/rollouts?run=${run}&trainer=${encodeURIComponent(trainer)}&filter=${S.filter}&limit=200`);
  document.getElementById("rbf").innerHTML = ["all", "blocked", "failed", "solved"].map(f =>
    `<button data-filter="${f}" class="${f === S.filter ? "on" : ""}">${f} (${d.counts[f]})</button>`).join("");
  document.getElementById("rbcount").textContent =
    (d.rollouts.length < d.counts[S.filter] ? `newest ${d.rollouts.length} shown` : "") +
    (d.read < d.files ? ` (counts over the newest ${d.read} of ${d.files} files)` : "");
  document.getElementById("rblist").innerHTML = "<tr>" + ["version", "task", "reward", "score", "tools", "guard",
    "failure"].map(h => `<th>${h}</th>`).join("") + "</tr>" + d.rollouts.map(r =>
      `<tr class="row ${S.open && S.open[0] === run && S.open[1] === r.id ? "sel" : ""}" data-run="${run}" ` +
      `data-id="${esc(r.id)}"><td>${esc(r.version)}</td><td>${esc(r.task)}</td>` +
      `<td>${fmt(r.reward)}</td><td class="${r.score === 1 ? "good" : ""}">${fmt(r.score)}</td><td>${esc(r.tool_calls)}</td>` +
      `<td class="bad">${r.rules.map(esc).join(", ")}</td><td class="bad">${esc(r.failure)}</td></tr>`).join("");
}
async function openRollout(run, id) {
  S.open = [run, id];
  const d = await get(`api/rollout?run=${run}&id=${encodeURIComponent(id)}`), s = d.summary;
  let h = `<h3>${esc(s.task)} <span class="muted">${esc(d.id)}</span></h3><div>reward <b>${fmt(s.reward)}</b> · ` +
    `score ${fmt(s.score)} · tool calls ${esc(s.tool_calls)} · started at version ${esc(s.start_version)} · ` +
    `${fmt(s.seconds)} s · ${esc(d.agent)} ${esc(d.harness_version)}` +
    (s.failure ? ` · <span class="bad">ungraded: ${esc(s.failure)}</span>` : "") + `</div><div class="muted">${esc(s.reason)}</div>`;
  h += d.verdicts.map(v => `<div class="verdict"><b class="bad">BLOCKED</b> by rule <code class="rule">${esc(v.rule)}</code>: ` +
    `<code>${esc(v.tool)}</code> <pre>${esc(v.arguments)}</pre><div class="note">${esc(v.note)}</div></div>`).join("");
  h += d.errors.map(e => `<pre class="bad">${esc(e)}</pre>`).join("");
  h += d.steps.map(st => `<div class="step ${st.blocked.length ? "blockedstep" : ""}"><span class="src">${esc(st.source)}</span>` +
    (st.source === "agent" ? `<span class="muted"> version ${esc(st.adapter_version)} · ${esc(st.prompt_tokens)} prompt + ` +
      `${esc(st.completion_tokens)} completion tokens · mean logprob ${fmt(st.mean_logprob)}</span>` : "") +
    (st.blocked.length ? ` <b class="bad">guard note (${st.blocked.map(i => esc(d.verdicts[i].rule)).join(", ")})</b>` : "") +
    `<pre>${esc(st.message)}</pre>` +
    st.tool_calls.map(c => `<div>tool call <code>${esc(c.function_name)}</code>` +
      `<pre>${esc(JSON.stringify(c.arguments, null, 1))}</pre></div>`).join("") +
    st.results.map(r => `<div>result<pre>${esc(r.content)}</pre></div>`).join("") + `</div>`).join("");
  document.getElementById("detail").innerHTML = h;
  document.getElementById("detail").classList.remove("muted");
  for (const tr of document.querySelectorAll("tr.row")) tr.classList.toggle("sel", tr.dataset.id === id);
}
document.getElementById("rbsel").onchange = e => { S.sel = e.target.value; listRollouts(); };
document.getElementById("rbf").onclick = e => { if (e.target.dataset.filter) { S.filter = e.target.dataset.filter; listRollouts(); } };
document.getElementById("rblist").onclick = e => { const tr = e.target.closest("tr.row"); if (tr) openRollout(tr.dataset.run, tr.dataset.id); };
// ---- polling: new metrics lines only; the runs list and guard counts less often
async function poll() {
  try {
    if (S.tick % 5 === 0) S.runs = await get("api/runs");
    let changed = false;
    for (const r of S.runs) {
      const d = await get(`api/metrics?run=${r.id}&after=${d0(r.id)}`);
      if (d.reset) { S.lines[r.id] = []; S.after[r.id] = 0; changed = true; continue; }
      if (d.lines.length) { (S.lines[r.id] = S.lines[r.id] || []).push(...d.lines); changed = true; }
      S.after[r.id] = d.next;
      if (S.tick % 3 === 0) { S.guard[r.id] = await get(`api/guard?run=${r.id}`); changed = true; }
    }
    if (changed || S.tick === 0) { draw(); drawRuns(); }
    await listRollouts();
    document.getElementById("err").textContent = "";
  } catch (e) { document.getElementById("err").textContent = `dashboard: ${e.message} (retrying)`; }
  S.tick++;
  setTimeout(poll, 2000);
}
const d0 = id => S.after[id] || 0;
poll();
</script></body></html>"""


if __name__ == "__main__":
    main()
