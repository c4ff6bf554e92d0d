"""The live dashboard: a run's metrics as charts that grow while it trains, and a browser of its rollouts.

    python dashboard.py runs/a [runs/b ...] [--host 127.0.0.1] [--port 8765]     # finished or live runs
    python train.py --model tiny --dashboard                # train.py runs this file as a process of its own

One aiohttp app, one page (CSS, JS and hand-drawn SVG charts inline: no CDN, works offline) that polls every 2 s
for the metrics lines it has not seen. Several run dirs overlay; an eval output dir works as a run. Every request
needs the token in the URL it prints (then an HttpOnly cookie): reaching the port is not enough (a public task's
agent, another user). Whatever a request names is checked (a path must stay inside the run dir); files are read on
the dashboard's own threads, each once.

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

import metrics

MAX_LIMIT = 500                 # rollouts per list answer; a larger ?limit= is clamped to it
MAX_SCAN = 5000                 # newest rollout files read per run (each holds its token ids: ~10-200 kB)
FILTERS = ("all", "blocked", "failed", "solved")
REPORTS = ("report.html", "result.json", "report.md")     # what eval.py writes
SKIP = {"rollouts", "adapters", "checkpoint", "checkpoint.tmp", "checkpoint.prev", "sandboxes"}   # big, no reports
COOKIE = "harness_rl_token"
PAGE = Path(__file__).with_name("dashboard.html")   # the page: HTML, CSS and its script
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
                self.metrics.append(metrics.renamed(m))
        if whole:
            self.offset += len(whole)
            self.tail = whole[-256:]
        return self.metrics

    def rollouts(self):
        """Rows of the newest MAX_SCAN readable ATIF files under rollouts/<trainer>/<version>/, newest first (version,
        then time); each parsed once per (mtime, size), so a half-written file is read again once it changes."""
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
    app, page = web.Application(middlewares=[auth]), PAGE.read_text().replace(
        "/*CHARTS*/[]", json.dumps(metrics.charts(), ensure_ascii=False))      # the metrics table's charts
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
        return web.Response(text=page.replace("<script>", f'<script nonce="{nonce}">'), content_type="text/html",
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
    """Serve on the running event loop: (AppRunner, url with ?token=); end it with `await runner.cleanup()`.
    port 0 = any free port (the url says which); token None = a fresh one."""
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


if __name__ == "__main__":
    main()
