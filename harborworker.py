"""The worker of harborenv.py, run by Harbor's venv's Python (3.12+): `python -I harborworker.py '<json>'`.

It makes one environment with Harbor's EnvironmentFactory - the task's own task.toml read by Harbor's Task model, its
network policy, its image prebuilt by containers.py where the type is docker (Harbor's build would ask a registry for
the FROM: none is reachable here), our mounts -, starts it, then serves requests as JSON lines on stdin/stdout, each
answered with its id, several at once: exec, upload_dir, upload_file, download_dir, stop (the environment stopped and
deleted). Harbor and the standard library only: no project import (like relay.py).
"""
import asyncio
import json
import os
import sys
import time
from pathlib import Path


async def _open(cfg):
    """Harbor's environment of the task, made (not started)."""
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
    # its main container sleeps through SIGTERM: stopped at once (Compose would wait 10 s for it); labelled with our
    # run's pid, as containers.py labels its own (sandbox.watch's reaper removes them after a kill -9)
    label = {"harness-rl.pid": str(cfg.get("pid") or os.getppid())}
    # no device nodes made (the host reads what lands in the binds), no raw sockets, no privilege gained by exec
    overlay = {"services": {"main": {"stop_grace_period": "0s", "labels": label, "cap_drop": ["MKNOD", "NET_RAW"],
                                     "security_opt": ["no-new-privileges:true"]}}}
    if (lim := cfg.get("limits")) and cfg["type"] == "docker":     # a rollout's bounds (containers.limits)
        overlay["services"]["main"] |= {"cpus": lim["cpus"], "mem_limit": f"{lim['memory_mb']}m",
                                        "memswap_limit": f"{lim['memory_mb']}m", "pids_limit": lim["pids"],
                                        "ulimits": {"fsize": lim["file_mb"] << 20}}
    policy = env_cfg.resolve_baseline()
    if cfg["type"] == "docker" and policy.network_mode == NetworkMode.PUBLIC:
        # a public task's network reaches nothing on this machine (no address on the host's side of the bridge, no
        # route out: containers.network's rule)
        overlay["networks"] = {"default": {"internal": True, "labels": label, "driver_opts": {
            "com.docker.network.bridge.inhibit_ipv4": "true"}}}
    fast = Path(cfg["trial"]) / "harness-rl-overlay.json"
    fast.write_text(json.dumps(overlay))
    extra = [fast]
    if cfg["type"] == "docker" and policy.network_mode == NetworkMode.NO_NETWORK:
        # Harbor's docker type enforces no-network with an egress sidecar built FROM an image on Docker Hub (no
        # registry here): its own no-network overlay instead (the main container's network_mode: none)
        import harbor.environments.docker as docker_env
        policy, extra = NetworkPolicy(), [*extra, Path(docker_env.__file__).parent / "docker-compose-no-network.yaml"]
    return EnvironmentFactory.create_environment(
        EnvironmentType(cfg["type"]), task.paths.environment_dir, task.paths.task_dir.name, cfg["session"], paths,
        env_cfg, network_policy=policy, mounts=cfg.get("mounts") or None, extra_docker_compose=extra)


async def _serve(cfg):
    # the answers go out on a copy of stdout; what Harbor or a provider's library prints goes to stderr (the log)
    out, t0 = os.fdopen(os.dup(1), "w"), time.monotonic()
    os.dup2(2, 1)

    def say(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()
    env = None
    try:
        env = await _open(cfg)          # a task Harbor's model refuses fails here, said as Harbor says it
        await env.start(force_build=False)
    except Exception as e:                      # noqa: BLE001 - told to our side, which raises it
        say({"id": 0, "ok": False, "error": f"{type(e).__name__}: {e}"[:2000]})
        if env is not None:             # what a start that failed halfway made
            await env.stop(delete=True)
        return
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


if __name__ == "__main__":
    asyncio.run(_serve(json.loads(sys.argv[1])))
