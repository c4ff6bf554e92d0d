"""Containers: rollouts under Docker (`--sandbox docker`) - a private daemon, a base image made offline, each task's
image built from its Dockerfile unchanged (RUN included), one container per rollout with its limits.

`Docker`: a dockerd of this project's own (its images and build cache under the cache dir, shared across runs; its
socket and exec root under /tmp), started on first use or shared with the run already using it; when a process
ends (kill -9 included) sandbox.watch's reaper removes its containers, then stops the daemon if it started it and
no other run's container is left. `base_image`: Debian bookworm made
by debootstrap from the archive apt uses, imported as BASE (no registry needed). `task_image`: the task's
environment/Dockerfile built as it is, except a FROM naming an image this daemon lacks, which is built on BASE (and
said so); a task without a Dockerfile gets BASE with its environment/ files at /app. `Box`: one rollout's container
(Harbor's shape: it sleeps; the agent, then the verifier, run in it by `docker exec`), its root file system read-only
but for the WORKDIR (a volume filled from the image), HOME, TMPDIR and a small /tmp; no capabilities; `--network
none` for a no-network task (the proxy through its Unix socket, relay.py), a network of the run's own, internal (no
route out), for the others; processes, memory, CPUs and the largest file bounded per rollout.

Left out: a disk quota on the WORKDIR volume (overlay2 on ext4 has none: the largest file is bounded, not their
sum), images for other architectures, registries (a FROM this daemon lacks is mapped, never pulled), Compose
sidecars, the separate verifier container, Harbor's own environment classes (remote sandboxes).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sandbox as SB
import taskenv
from suites import TaskError, cache_root

BASE = "harness-rl/debian:bookworm"          # the image every FROM falls back to where no registry is reachable
SUITE = "bookworm"
# per rollout, where a task is silent: bubblewrap's LIMITS, CPUs, /tmp, what a command may print into our logs
DEFAULTS = dict(SB.LIMITS, cpus=1.0, tmp_mb=512, log_mb=64)
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"     # an image's PATH when it sets none
BUILD_TIMEOUT = 1800
WIPE = """import os, shutil, sys
for n in os.listdir('/dev/shm'):
    p = os.path.join('/dev/shm', n)
    shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
for root, dirs, files in os.walk(sys.argv[1]):
    for n in dirs + files:
        p = os.path.join(root, n)
        if os.path.islink(p) and os.path.realpath(p).startswith(('/tests', '/logs', '/run/harness-rl', '/solution')):
            os.unlink(p)
"""
# a container's first process (pid 1, which kill(-1) spares): it reaps what an agent orphans, and nothing else
INIT = "import os, time\nwhile True:\n    try:\n        os.waitpid(-1, 0)\n    except ChildProcessError:\n" \
       "        time.sleep(1)\n"


def _short(path) -> str:
    return hashlib.sha256(str(path).encode()).hexdigest()[:10]


class Docker:
    """This project's dockerd: state under `root` (default <cache>/docker), socket and exec root under /tmp (a Unix
    socket path has 108 bytes). `start()` reuses a daemon already serving that root, else starts one and owns it."""

    def __init__(self, root=None):
        self.root = Path(root or cache_root() / "docker").resolve()
        self.run = Path(tempfile.gettempdir()) / f"harness-rl-docker-{_short(self.root)}"
        self.sock, self.proc, self.owned = self.run / "docker.sock", None, False
        self.cli_path = next((str(p) for p in (Path(shutil.which("dockerd") or "/nonexistent").parent / "docker",
                                               Path("/usr/bin/docker")) if p.is_file()), shutil.which("docker"))

    def argv(self):
        return [self.cli_path, "-H", f"unix://{self.sock}"]

    def cli(self, *args, input=None, timeout=120, check=False):
        """`docker -H <our socket> args` -> CompletedProcess (text). check: raise RuntimeError with its stderr."""
        p = subprocess.run([*self.argv(), *args], input=input, capture_output=True,
                           text=isinstance(input, (str, type(None))), timeout=timeout,
                           env=os.environ | {"DOCKER_BUILDKIT": "0", "DOCKER_CLI_HINTS": "false"})
        if check and p.returncode:
            err = p.stderr if isinstance(p.stderr, str) else p.stderr.decode(errors="replace")
            raise RuntimeError(f"docker {args[0]}: {err.strip()[-600:]}")
        return p

    def alive(self) -> bool:
        try:
            return self.sock.exists() and \
                self.cli("version", "--format", "{{.Server.Version}}", timeout=20).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def start(self, timeout=90):
        if why := SB.docker_missing():
            raise RuntimeError(f"--sandbox docker: {why}")
        self.run.mkdir(mode=0o700, exist_ok=True)
        (self.run / "users").mkdir(exist_ok=True)
        (self.run / "users" / str(os.getpid())).touch()        # we use it: no other run's end stops it
        SB.watch(docker=(self.argv(), self.run / "dockerd.pid"))    # when we end: our containers, then maybe it
        if self.alive():                    # another run's (or left by a killed one): ours too
            self.sweep()
            return self
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.run / "dockerd.log", "ab")
        argv = ["dockerd", "--data-root", str(self.root), "--exec-root", str(self.run / "exec"),
                "--host", f"unix://{self.sock}", "--pidfile", str(self.run / "dockerd.pid"), "--iptables=false",
                "--ip-forward=false", "--bridge=none", "--storage-driver", "overlay2",
                # rollouts' own networks: 2 048 of /27 (docker's default pools hold 31)
                "--default-address-pool", "base=172.30.0.0/16,size=27"]
        # its own session, not killed with us directly: the reaper removes our containers first, then stops it
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while not self.alive():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = (self.run / "dockerd.log").read_text(errors="replace")[-800:]
                raise RuntimeError(f"--sandbox docker: dockerd did not start (log {self.run / 'dockerd.log'}): {tail}")
            time.sleep(0.2)
        self.owned = True
        self.sweep()
        return self

    def sweep(self):
        """Remove containers a killed run left (its pid is in their label and gone), and their volumes."""
        p = self.cli("ps", "-aq", "--filter", "label=harness-rl.pid", "--format", '{{.ID}} {{.Label "harness-rl.pid"}}')
        dead = [c for c, pid in (line.split() for line in p.stdout.splitlines() if len(line.split()) == 2)
                if not Path(f"/proc/{pid}").exists()]
        if dead:
            self.cli("rm", "-f", "-v", *dead, timeout=300)
        p = self.cli("network", "ls", "-q", "--filter", "label=harness-rl.pid", "--format",
                     '{{.ID}} {{.Label "harness-rl.pid"}}')
        dead = [n for n, pid in (line.split() for line in p.stdout.splitlines() if len(line.split()) == 2)
                if not Path(f"/proc/{pid}").exists()]
        if dead:
            self.cli("network", "rm", *dead, timeout=300)

    def stop(self):
        """Stop the daemon we started, once no container is left on it (another run may be using it)."""
        if self.proc is None or self.cli("ps", "-aq").stdout.split():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        SB.kill(self.proc.pid)
        self.proc, self.owned = None, False


# ----------------------------------------------------------------------------- images

def _mirror() -> str:
    """The Debian archive apt already uses (deb822 or one-line sources), else deb.debian.org."""
    for f in sorted(Path("/etc/apt").glob("sources.list*")) + sorted(Path("/etc/apt/sources.list.d").glob("*")):
        try:
            text = f.read_text()
        except OSError:
            continue
        m = re.search(r"^URIs:\s*(\S+/debian)/?\s*$", text, re.M) or \
            re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)/?\s+\S+", text, re.M)
        if m:
            return m.group(1)
    return "http://deb.debian.org/debian"


def base_image(d: Docker, quiet=False) -> str:
    """BASE, made once: debootstrap (minbase + python3) from the Debian archive, imported (~30 s, 253 MB)."""
    if ("image", BASE) in _SEEN or d.cli("image", "inspect", BASE).returncode == 0:
        _SEEN["image", BASE] = BASE
        return BASE
    if not shutil.which("debootstrap"):
        raise RuntimeError(f"--sandbox docker: no {BASE} image and no debootstrap to make it: apt-get install "
                           "debootstrap (or `docker tag` an image of yours as it)")
    with tempfile.TemporaryDirectory(prefix="harness-rl-rootfs-", dir=d.root) as tmp:
        rootfs, t0 = Path(tmp) / "rootfs", time.monotonic()
        quiet or print(f"docker: making {BASE} with debootstrap from {_mirror()} (once, ~1-2 min)", flush=True)
        p = subprocess.run(["debootstrap", "--variant=minbase", "--include=python3", SUITE, str(rootfs), _mirror()],
                           capture_output=True, text=True, timeout=1800)
        if p.returncode:
            raise RuntimeError(f"--sandbox docker: debootstrap failed: {(p.stdout + p.stderr).strip()[-600:]}")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run([*d.argv(), "import", "-", BASE], stdin=tar.stdout,
                             capture_output=True, timeout=600)
        tar.stdout.close()
        if tar.wait() or imp.returncode:
            raise RuntimeError(f"--sandbox docker: docker import failed: {imp.stderr.decode(errors='replace')[-400:]}")
        quiet or print(f"docker: {BASE} made in {time.monotonic() - t0:.0f}s", flush=True)
    return BASE


def _context_hash(ctx: Path, extra="") -> str:
    h = hashlib.sha256(extra.encode())
    for p in sorted(ctx.rglob("*")) if ctx.is_dir() else ():
        h.update(str(p.relative_to(ctx)).encode() + b"\0")
        if p.is_symlink():
            h.update(os.readlink(p).encode())
        elif p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def dockerfile(task, d: Docker) -> tuple[str, list]:
    """The Dockerfile a task's image is built from, and notes: its own text, a FROM this daemon lacks mapped to
    BASE (`FROM x AS y` keeps its stage name)."""
    df = task.container.dockerfile
    lines, notes, stages = df.read_text().splitlines(), [], set()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", line, re.I)
        if not m:
            continue
        image, rest = m.group(3), m.group(4)
        if (s := re.match(r"\s+AS\s+(\S+)", rest, re.I)):
            stages.add(s.group(1).lower())
        if image.lower() in stages or image == "scratch" or d.cli("image", "inspect", image).returncode == 0:
            continue
        lines[i] = f"{m.group(1)}{m.group(2)}{BASE}{rest}"
        notes.append(f"{df}: FROM {image} is not on this daemon (no registry is reached): built on {BASE}")
    return "\n".join(lines) + "\n", notes


def task_image(task, d: Docker, quiet=False, timeout=None) -> str:
    """The task's image, built once per content (build cache shared): tag harness-rl/task:<hash>. A task without
    a Dockerfile: BASE (its environment/ files are copied in: Box.copy_in)."""
    if task.container.dockerfile is None:
        return base_image(d, quiet)
    key = ("image", task.path, task.container.dockerfile.stat().st_mtime_ns)
    if key in _SEEN:
        return _SEEN[key]
    text, notes = dockerfile(task, d)
    ctx = Path(task.path) / "environment"
    tag = f"harness-rl/task:{_context_hash(ctx, text)}"
    if d.cli("image", "inspect", tag).returncode == 0:
        _SEEN[key] = tag
        return tag
    if BASE in text:
        base_image(d, quiet)
    for n in notes:
        quiet or print(f"docker: {n}", flush=True)
    t0 = time.monotonic()
    p = d.cli("build", "-q", "--force-rm", "-t", tag, "-f", "-", str(ctx), input=text,
              timeout=timeout or (task.config.get("environment") or {}).get("build_timeout_sec") or BUILD_TIMEOUT)
    if p.returncode:
        raise TaskError(f"{task.container.dockerfile or ctx}: docker build failed: {p.stderr.strip()[-800:]}")
    quiet or print(f"docker: built {task.name} as {tag} in {time.monotonic() - t0:.1f}s", flush=True)
    _SEEN[key] = tag
    return tag


_SEEN = {}      # per process: a task's Dockerfile -> its image tag, an image -> its config (a docker call: ~50 ms)


def _config(image, d: Docker) -> dict:
    if ("config", image) not in _SEEN:
        p = d.cli("image", "inspect", "--format", "{{json .Config}}", image, check=True)
        _SEEN["config", image] = json.loads(p.stdout) or {}
    return _SEEN["config", image]


def workdir(task, image, d: Docker) -> str:
    """Where the agent works: [environment] workdir, else the image's WORKDIR, else /app (never /)."""
    wd = task.container.workdir or _config(image, d).get("WorkingDir") or "/"
    return wd if wd != "/" else "/app"


def search_path(image, d: Docker) -> str:
    """PATH in a container: the image's own first (its python3, its tools), then this Python's dir (a fallback
    `python3` for an image without one)."""
    env = dict(e.split("=", 1) for e in _config(image, d).get("Env") or [] if "=" in e)
    return env.get("PATH", STD_PATH) + ":" + \
        os.path.dirname(sys.executable)


def resolve_sandbox(mode, tasks, shown=(), log=print):
    """taskenv.resolve_sandbox, and for docker the daemon started and every task's image built now (before a server
    starts, each once: a Dockerfile that does not build stops the run here, naming its task)."""
    sandbox, warning = taskenv.resolve_sandbox(mode, tasks, shown)
    if sandbox == "docker":
        d, t0 = daemon(), time.monotonic()
        images = {task_image(t, d, quiet=log is None) for t in tasks}
        log and log(f"docker: {len(tasks)} task(s), {len(images)} image(s) ready in {time.monotonic() - t0:.1f}s "
                    f"(daemon {d.sock}, images under {d.root})")
    return sandbox, warning


# ----------------------------------------------------------------------------- one rollout's container

_DAEMON = {}


def daemon() -> Docker:
    """This process's daemon, started on first use (stopped when this process ends, kill -9 included, by
    sandbox.watch's reaper: once no container is left on it), checked again every 10 s."""
    d = _DAEMON.get("d")
    if d is None or time.monotonic() - _DAEMON["checked"] > 10 and not d.alive():
        _DAEMON["d"] = d = Docker().start()
    _DAEMON["checked"] = time.monotonic()
    return d


def network(d: Docker, name) -> str:
    """A rollout's own network, for a task that allows one: a bridge of this daemon's, internal, whose host side has
    no address (inhibit_ipv4) - its container reaches nothing on this machine, no other rollout, nothing beyond
    (no NAT here). Removed with the container."""
    d.cli("network", "create", "--internal", "--label", f"harness-rl.pid={os.getpid()}", "-o",
          "com.docker.network.bridge.inhibit_ipv4=true", name, check=True)
    return name


def limits(task) -> dict:
    """A rollout's bounds: the task's [environment] cpus / memory_mb where it gives them, else DEFAULTS."""
    out = dict(DEFAULTS, memory_mb=SB.sandbox_mb(task.container.memory_mb or DEFAULTS["memory_mb"]))
    out["cpus"] = min(task.container.cpus or out["cpus"], os.cpu_count() or 1)
    return out


class Box:
    """One rollout's container. dirs (host): home, tmp (the agent's HOME and TMPDIR), tests, vhome, logs (empty
    until the verifier runs), out (agent_output.txt). Made by `Box.open`; `argv` runs a command in it; `clear`
    kills every process but its init; `close` removes it and its volume."""
    HOME, TMP, VHOME, OUT = SB.AGENT_HOME, SB.AGENT_TMP, "/run/harness-rl/home", "/run/harness-rl/agent_output.txt"

    def __init__(self, d: Docker, name, image, workdir, box_dir):
        self.d, self.name, self.image, self.workdir, self.dir = d, name, image, workdir, Path(box_dir)
        self.python, self.path, self.network = sys.executable, search_path(image, d), None

    @classmethod
    def open(cls, d: Docker, task, image, box_dir, name, tools=(), offline=True, mounts=(), bounds=None):
        """Create and start the container: `tools` read-only at their own paths, `mounts` (host, inside, writable)."""
        wd = workdir(task, image, d)
        b = cls(d, f"harness-rl-{name}", image, wd, box_dir)
        for sub in ("home", "tmp", "tests", "vhome", "logs"):
            (b.dir / sub).mkdir(parents=True, exist_ok=True)
            os.chmod(b.dir / sub, 0o777)       # the image's user, whoever it is (the box dir is the run's: 0700)
        (b.dir / "agent_output.txt").write_text("")
        lim = bounds or limits(task)
        if not offline:
            b.network = network(d, b.name)
        # root's powers over files (as Docker and Harbor give them: a verifier's `cp` over a read-only file), no
        # other capability; no log kept (an agent writing to pid 1's stdout would fill the daemon's disk)
        argv = ["run", "-d", "--name", b.name, "--label", f"harness-rl.pid={os.getpid()}", "--read-only",
                "--cap-drop", "ALL", "--cap-add", "CHOWN", "--cap-add", "DAC_OVERRIDE", "--cap-add", "FOWNER",
                "--security-opt", "no-new-privileges", "--log-driver", "none",
                *(["--cgroup-parent", SB.CGROUP_PARENT] if SB.cgroup_parent_ok() else []),
                "--network", b.network or "none", "--pids-limit", str(lim["pids"]),
                "--memory", f"{lim['memory_mb']}m", "--memory-swap", f"{lim['memory_mb']}m",
                "--cpus", f"{lim['cpus']:g}", "--ulimit", f"fsize={lim['file_mb'] << 20}",
                "--tmpfs", f"/tmp:rw,nosuid,nodev,size={lim['tmp_mb']}m,mode=1777",
                "--mount", f"type=volume,dst={wd}", "--workdir", wd, "--entrypoint", b.python]
        binds = [(b.dir / "home", cls.HOME, True), (b.dir / "tmp", cls.TMP, True), (b.dir / "tests", "/tests", False),
                 (b.dir / "logs", "/logs/verifier", True), (b.dir / "vhome", cls.VHOME, True),
                 (b.dir / "agent_output.txt", cls.OUT, False), *mounts]
        binds += [(t, t, False) for t in _tools(tools)]
        for src, dst, rw in binds:
            if "," in f"{src}{dst}":
                raise ValueError(f"--sandbox docker: a mount path with a comma: {src} -> {dst}")
            argv += ["--mount", f"type=bind,src={src},dst={dst}" + ("" if rw else ",readonly")]
        argv += [image, "-I", "-c", INIT]
        b.d.cli(*argv, check=True, timeout=120)
        return b

    def argv(self, argv, env=None, user=None, workdir=None, stdin=False):
        """The host argv that runs `argv` in the container (env through a file of the box: never in `ps`)."""
        # the CLI relays the command's output into a log of ours: bounded (a flood ends its own command)
        out = ["/bin/sh", "-c", f'ulimit -f {DEFAULTS["log_mb"] * 2048} && exec "$@"', "sh", *self.d.argv(), "exec"]
        out += ["-i"] if stdin else []
        if env:
            f = self.dir / f"env-{len(list(self.dir.glob('env-*')))}"
            fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.writelines(f"{k}={v}\n" for k, v in (env | {"PATH": self.path}).items() if "\n" not in str(v))
            out += ["--env-file", str(f)]
        out += ["-w", workdir or self.workdir] + (["-u", user] if user else [])
        return out + [self.name, *argv]

    def disk_paths(self) -> list:
        """Where its files lie on this machine besides the box dir: the WORKDIR volume (the root is read-only)."""
        mounts = json.loads(self.d.cli("inspect", "-f", "{{json .Mounts}}", self.name, check=True).stdout)
        return [m["Source"] for m in mounts if m.get("Type") == "volume"]

    def copy_in(self, work):
        """A host dir's contents into the WORKDIR (environment/ of a task without a Dockerfile, a harness's files)."""
        if any(Path(work).iterdir()):
            self.d.cli("cp", f"{work}/.", f"{self.name}:{self.workdir}", check=True, timeout=300)

    def clear(self):
        """Before the verifier: the container restarted (every process of the agent's gone - its first one too, which
        an agent can take over with ptrace -, /tmp fresh; the WORKDIR volume and the binds stay), then what it left
        in /dev/shm removed and its links from the WORKDIR into /tests, /logs or /run/harness-rl (which dangle while
        it works and would point at the tests or the verifier's files after) unlinked."""
        self.d.cli("restart", "-t", "0", self.name, check=True, timeout=120)
        self.d.cli("exec", self.name, self.python, "-I", "-c", WIPE, self.workdir, timeout=300, check=True)

    def close(self):
        self.d.cli("rm", "-f", "-v", self.name, timeout=120)
        if self.network:
            self.d.cli("network", "rm", self.network, timeout=120)


def _tools(paths) -> list:
    """Host paths a container shows read-only at their own paths: the tools outside the system dirs (this Python, a
    harness install); one under them (node in /usr/bin) as its own file - the image's system stays the image's."""
    out, system = set(), False
    for t in {os.path.realpath(t) for t in paths if os.path.exists(t)}:
        if any(t == s or t.startswith(s + "/") for s in SB.SYSTEM_DIRS):
            system = True
        else:
            out.add(t)
    node = shutil.which("node")
    if system and node and any(os.path.realpath(node).startswith(s + "/") for s in SB.SYSTEM_DIRS):
        out.add(os.path.realpath(node))
    return sorted(t for t in out if not any(t.startswith(u + "/") for u in out))


def verify(task, b: Box, agent_output="", timeout=None):
    """Grade the work dir as the agent left it, in its own container (Harbor's way): restarted (Box.clear), tests/
    copied in now at /tests, a fresh HOME, test.sh run, the reward read from /logs/verifier (a host dir)."""
    b.clear()
    for sub in ("tests", "logs", "vhome"):      # emptied in place: the container's binds hold these inodes
        for p in (b.dir / sub).iterdir():
            SB.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    shutil.copytree(Path(task.path) / "tests", b.dir / "tests", dirs_exist_ok=True)
    with open(b.dir / "agent_output.txt", "w") as f:      # in place: the bind holds this inode
        f.write(agent_output or "")
    extra = taskenv.resolve_env(task.config.get("verifier", {}).get("env", {}), f"{task.path}/task.toml: [verifier] env")
    env = taskenv.base_env(b.VHOME) | taskenv.task_env(task, extra) | {
        "WORKDIR": b.workdir, "TESTS_DIR": "/tests", "LOGS_DIR": "/logs/verifier", "AGENT_OUTPUT": b.OUT,
        **taskenv.pristine_python(b.VHOME)}
    t = timeout or task.verifier_timeout
    rc, timed_out, out, secs = taskenv.run_logged(b.argv(["bash", "/tests/test.sh"], env), t, b.dir / "test-stdout.txt")
    if timed_out:
        b.clear()
        return taskenv.Result(None, f"verifier timed out after {t:g}s", {}, None, secs, out)
    score, rewards, reason = taskenv.read_reward(b.dir / "logs")
    if score is None:
        reason += f" (exit code {rc})"
    return taskenv.Result(score, reason, rewards, rc, secs, out)


def solve(task, d: Docker, root, timeout=None, name=None, run=True):
    """The oracle under docker: solution/ at /solution, solve.sh run (run=False: nothing, an agent that does
    nothing), then the verifier -> (solve.sh's exit code, Result)."""
    image = task_image(task, d, quiet=True)
    box_dir = Path(tempfile.mkdtemp(prefix="oracle-", dir=root))
    sol = box_dir / "solution"
    shutil.copytree(Path(task.path) / "solution", sol)
    b = Box.open(d, task, image, box_dir / "box", name or f"oracle-{box_dir.name}", SB.tool_paths(),
                 mounts=[(sol, "/solution", False)])
    try:
        if not task.container.dockerfile:
            b.copy_in(taskenv.materialize(task, box_dir / "work"))
        extra = taskenv.resolve_env(task.config.get("solution", {}).get("env", {}), f"{task.path}/task.toml: [solution] env")
        env = taskenv.base_env(b.HOME) | taskenv.task_env(task, extra) | {"SOLUTION_DIR": "/solution", "WORKDIR": b.workdir}
        argv = b.argv(["bash", "/solution/solve.sh"] if run else ["true"], env)
        rc, timed_out, out, _ = taskenv.run_logged(argv, timeout or task.agent_timeout, box_dir / "solve.log")
        return (None if timed_out else rc), verify(task, b)
    finally:
        b.close()
        SB.rmtree(box_dir)
