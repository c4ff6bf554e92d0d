"""containers.py, --sandbox docker: the project's own daemon and base image, Harbor tasks whose Dockerfiles RUN things
built and solved, real harnesses in containers, the isolation probes of bubblewrap plus the host's services out of
reach of a public-network task, each rollout's limits, and a kill -9 of the trainer that leaves no container."""
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import containers
import harborenv
import harnesses
import oracle
from sandbox import CGROUP_PARENT, LIMITS, _cgroup_base, cgroup_parent_ok, docker_missing, tool_paths
from tasks import TaskError, check_task, check_tasks, load_task, load_tasks
import taskenv
import tiny
from chat import ChatFormat
from test_rollout import ORACLE, SCAN, Upstream, at_once, make_task, misbehaving_tasks, network_task, one, \
    private_tmp, private_tmp_dir, scattered, _probe_run

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def docker():
    """The daemon with the base image made (debootstrap, ~30 s the first time). CI sets HARNESS_RL_REQUIRE_DOCKER:
    there these tests fail, not skip, without Docker."""
    why = docker_missing()
    if not why:
        try:
            d = containers.daemon()
            containers.base_image(d, quiet=True)
            return d
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            why = str(e)
    (pytest.fail if os.environ.get("HARNESS_RL_REQUIRE_DOCKER") else pytest.skip)(f"docker: {why}")


@pytest.fixture(scope="module")
def lfm3(tmp_path_factory):
    return tiny.write_tiny_checkpoint(tmp_path_factory.mktemp("lfm3"), "lfm3")


@pytest.fixture(scope="module")
def harbor(docker):
    """Harbor's environments' venv (harnesses.py install harbor-env: Python 3.12+, Harbor, Compose), on this daemon."""
    try:
        harnesses.INSTALLS["harbor-env"].install(quiet=True)
    except Exception as e:   # noqa: BLE001 - CI installs it; elsewhere say why
        (pytest.fail if os.environ.get("HARNESS_RL_REQUIRE_DOCKER") else pytest.skip)(f"harbor-env: {e}")
    return docker


def engine(request, sandbox):
    """The daemon, Harbor's venv too for harbor:docker."""
    return request.getfixturevalue("harbor" if sandbox.startswith("harbor:") else "docker")


BOTH = ["docker", "harbor:docker"]


def ours(d):
    return d.cli("ps", "-aq", "--filter", f"label=harness-rl.pid={os.getpid()}").stdout.split()


def test_tasks_whose_dockerfiles_run_things_are_built_and_solved_only_under_docker(docker, tmp_path):
    """data/docker: a library installed into the image's Python, a database made at build time, a tool put on PATH.
    bubblewrap refuses each at start, naming its RUN line; docker builds each image once (a FROM it lacks mapped to
    its base, said so), the oracle scores 1 and an agent that does nothing 0."""
    tasks = load_tasks("docker")
    assert len(tasks) == 3 and all(t.container.engine_only for t in tasks)
    for t in tasks:
        for mode in ("bwrap", "dir"):
            with pytest.raises(TaskError, match=r"need --sandbox docker.*line \d+: 'RUN "):
                taskenv.resolve_sandbox(mode, [t])
        assert any("FROM python:3.11-slim is not on this daemon" in n for n in containers.dockerfile(t, docker)[1])
    assert containers.resolve_sandbox("docker", tasks, log=None) == ("docker", "")
    t0 = time.monotonic()
    assert len({containers.task_image(t, docker, quiet=True) for t in tasks}) == 3
    assert time.monotonic() - t0 < 5                          # built already: each once
    assert check_tasks([t.path for t in tasks], sandbox="docker") == {t.path.resolve(): [] for t in tasks}
    broken = tmp_path / "broken"                       # the checks can fail: an oracle that does nothing
    shutil.copytree(tasks[0].path, broken)
    (broken / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    assert [f.check for f in check_task(broken, "docker")] == [3]
    (broken / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nRUN false\n")
    assert [f.check for f in check_task(broken, "docker")] == [2]      # an image that does not build
    assert ours(docker) == [] and docker.cli("ps", "-aq", "--filter", "status=exited").stdout.split() == []


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("name", ["mini"] + [pytest.param(h, marks=pytest.mark.integration)
                                              for h in ("pi", "opencode", "hermes")])
def test_the_oracle_solves_them_through_a_real_harness_in_containers(request, tmp_path, name, sandbox, lfm3):
    """The oracle agent's steps (solution/oracle.json: the command, run through the harness's own shell tool) in each
    task's own container - ours, or Harbor's own DockerEnvironment (its Compose project, the harness bound in, the
    proxy through the rollout's socket): the image's library, database and tool are there, and each scores 1."""
    docker, tasks = engine(request, sandbox), load_tasks("docker")
    rs = asyncio.run(oracle.record(tasks, harnesses.get_harness(name), ChatFormat.from_checkpoint(lfm3), tmp_path / "out",
                              samples=1, sessions=3, max_tokens=4096, context=131072, sandbox=sandbox))
    assert sorted((r.task.name, r.score) for r in rs) == sorted((t.name, 1.0) for t in tasks), \
        [(r.task.name, r.reason, r.errors) for r in rs]
    assert ours(docker) == []


def test_every_attack_pays_without_the_guard_and_only_the_known_gaps_with_it_in_containers(docker, tmp_path, lfm3):
    """tests/attacks.json through mini under docker (test_warmstart's table, bubblewrap's): the container changes
    nothing the attacks rely on - each pays with the guard off - and the guard still stops all but the known gaps."""
    attacks = json.loads((ROOT / "tests" / "attacks.json").read_text())
    harness, fmt = harnesses.get_harness("mini"), ChatFormat.from_checkpoint(lfm3)
    off = asyncio.run(oracle.attack(attacks, harness, fmt, tmp_path / "off", guard=False, sandbox="docker"))
    assert [a["id"] for a in attacks if off[a["id"]] != (1.0, [])] == [], off
    on = asyncio.run(oracle.attack(attacks, harness, fmt, tmp_path / "on", guard=True, sandbox="docker"))
    paid = [a["id"] for a in attacks if (on[a["id"]][0] or 0) > 0 and not on[a["id"]][1]]
    assert paid == [a["id"] for a in attacks if "gap" in a], on
    assert ours(docker) == []


@pytest.mark.parametrize("sandbox", BOTH)
def test_docker_stops_the_hostile_probe_bubblewrap_stops(request, tmp_path, monkeypatch, sandbox):
    """test_rollout's probe (guard off) beside two victims, all in containers: it reads no oracle, no sibling's
    secret or files, forges no reward, reaches the server only without its key, and leaves nothing running."""
    docker = engine(request, sandbox)
    victims, probe, seen, alive, adapters = asyncio.run(_probe_run(tmp_path, sandbox,
                                                                   private_tmp(tmp_path, monkeypatch)))
    assert "probe done" in seen, seen[-2000:]
    assert ORACLE not in seen                                  # no oracle text reached the model
    assert all(f"server {p} 200" not in seen for p in ("/v1/models", "/v1/%6coad_lora_adapter"))
    assert all(v.secret not in seen for v in victims) and all(v.id not in seen for v in victims)
    assert all(len(v.turns) == 2 and v.aux_requests == 0 for v in victims)
    assert [v.score for v in victims] == [0.0, 0.0], [v.reason for v in victims]
    assert adapters == {} and not alive and probe.score == 0.0
    assert not (private_tmp_dir(tmp_path) / "escaped-verifier").exists()
    assert ours(docker) == []


GATEWAY = """python3 - <<'PY'
import socket
gw = [l.split()[2] for l in open("/proc/net/route").read().splitlines()[1:] if l.split()[1] == "00000000"]
addr = socket.inet_ntoa(bytes.fromhex(gw[0])[::-1]) if gw else None
s = socket.socket()
s.settimeout(2)
print("GATEWAY", addr, s.connect_ex((addr, {port})) if addr else "none")
PY
"""


@pytest.mark.parametrize("sandbox", BOTH)
@pytest.mark.parametrize("network_mode", ["no-network", "public"])
def test_an_agent_in_a_container_reaches_nothing_on_the_host_but_its_own_proxy(request, tmp_path, network_mode,
                                                                               sandbox):
    """Every loopback port scanned from inside: only its own proxy answers (relay.py through its socket), for a
    public-network task too - its network is the run's own bridge, whose host side has no address: a service on the
    host's every address (0.0.0.0) is not reached through its gateway either."""
    service = socket.socket()
    service.bind(("0.0.0.0", 0))
    service.listen()
    task = network_task(tmp_path / "tasks", network_mode)
    up = Upstream(command=[SCAN, GATEWAY.format(port=service.getsockname()[1])])
    try:
        engine(request, sandbox)
        r = asyncio.run(one(tmp_path, "mini", up, task=task, sandbox=sandbox, guard=False))
    finally:
        service.close()
    out = "\n".join(str(m.get("content")) for q in up.requests for m in q["messages"] if m.get("role") == "tool")
    scan = out.split("SCAN ", 1)[1]
    scanned, proxy_port = json.loads(scan.split(" own")[0]), int(scan.split(":")[-1].split("/")[0])
    assert r.score == 1.0 and "own proxy 200" in out and scanned == [proxy_port], out
    gateway = out.split("GATEWAY ", 1)[1].split()
    assert gateway[0] == "None" or gateway[1] != "0", out      # no route, or no answer there


@pytest.mark.parametrize("sandbox", BOTH)
def test_a_fork_bomb_a_memory_hog_and_a_disk_filler_end_their_own_containers_alone(request, tmp_path, monkeypatch,
                                                                                  sandbox):
    """test_rollout's four misbehaving agents beside an honest one, in containers: the bomb stops at --pids-limit,
    the hog (64 MB: its task's [environment] memory_mb) is killed inside its container, the filler's file stops at
    the largest-file bound, the scatterer's many files are stopped at the rollout's disk bound (its WORKDIR volume,
    or Harbor's writable root, counted); the honest rollout is graded 1, this process carries on, no container is
    left."""
    monkeypatch.setitem(containers.DEFAULTS, "pids", 64)
    monkeypatch.setitem(containers.DEFAULTS, "file_mb", 8)
    monkeypatch.setitem(LIMITS, "disk_mb", 32)
    tasks = misbehaving_tasks(tmp_path / "tasks", test_sh=(         # what each left, for this test (logs: a host dir)
        '#!/bin/bash\ncd "$WORKDIR"; cat forks.txt > "$LOGS_DIR/forks" 2>/dev/null; stat -c %s big.bin > '
        '"$LOGS_DIR/big" 2>/dev/null; ls > "$LOGS_DIR/ls"\n'
        'if [ "$(cat answer.txt 2>/dev/null)" = "42" ]; then echo 1; else echo 0; fi > "$LOGS_DIR/reward.txt"\n'))
    docker = engine(request, sandbox)
    rs = asyncio.run(at_once(tasks, tmp_path / "boxes", sandbox=sandbox))
    logs = {k: tmp_path / "boxes" / r.id / "logs" for k, r in rs.items()}
    assert rs["honest"].score == 1.0, rs["honest"].reason
    assert "hog.txt" not in (logs["hog"] / "ls").read_text() and rs["hog"].score in (0.0, None)
    assert int((logs["filler"] / "big").read_text()) <= 8 << 20
    forks = int((logs["bomb"] / "forks").read_text())
    assert 0 < forks < 64, forks
    assert scattered(rs["scatter"]), rs["scatter"].reason
    assert ours(docker) == []


KILLED = """
import asyncio, sys
sys.path[:0] = [{root!r}, {tests!r}]
import test_rollout as TR
async def main():
    await TR.one(__import__("pathlib").Path({tmp!r}), "mini", TR.Upstream(command="echo up; sleep 600"),
                 sandbox={sandbox!r}, timeout=900)
asyncio.run(main())
"""


@pytest.mark.parametrize("sandbox", BOTH)
def test_a_trainer_killed_by_sigkill_leaves_no_container(request, tmp_path, sandbox):
    """A process with a rollout in a container (its agent sleeping) is killed with SIGKILL: its reaper removes the
    containers labelled with its pid (the daemon stays: it is this process's); Harbor's worker, its stdin closed,
    stops its environment and ends."""
    docker = engine(request, sandbox)
    p = subprocess.Popen([sys.executable, "-c", KILLED.format(root=str(ROOT), tests=str(ROOT / "tests"),
                                                              tmp=str(tmp_path), sandbox=sandbox)],
                         start_new_session=True)
    label = f"label=harness-rl.pid={p.pid}"
    deadline = time.monotonic() + 120
    while not docker.cli("ps", "-q", "--filter", label).stdout.split():
        assert time.monotonic() < deadline and p.poll() is None, "no container started"
        time.sleep(0.2)
    time.sleep(1.0)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 60
    while docker.cli("ps", "-aq", "--filter", label).stdout.split():
        assert time.monotonic() < deadline, docker.cli("ps", "-a").stdout
        time.sleep(0.2)
    assert subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True).returncode == 1
    deadline = time.monotonic() + 60
    while subprocess.run(["pgrep", "-f", f"harborworker.py.*{tmp_path}"], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "Harbor's worker outlived its trainer"
        time.sleep(0.2)


# ----------------------------------------------------------------------------- a red team's findings, each closed

def _rollout(tmp_path, command, test_sh=None, files=None, toml="", sandbox="docker"):
    """One mini rollout under docker (guard off: the sandbox alone) of a write-42 task, its test.sh replaced."""
    task = make_task(tmp_path / "tasks")
    if test_sh:
        (task.path / "tests" / "test.sh").write_text(test_sh)
    for rel, text in (files or {}).items():
        (task.path / "tests" / rel).write_text(text)
    if toml:
        with open(task.path / "task.toml", "a") as f:
            f.write(toml)
    up = Upstream(command=command)
    r = asyncio.run(one(tmp_path, "mini", up, task=load_task(task.path), sandbox=sandbox, guard=False))
    out = "\n".join(str(m.get("content")) for q in up.requests for m in q["messages"] if m.get("role") == "tool")
    return r, out


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the attack's registers are x86_64's")
@pytest.mark.parametrize("sandbox", BOTH)
def test_an_agent_that_takes_over_the_containers_first_process_forges_nothing(request, tmp_path, sandbox):
    """The agent ptraces pid 1 (the one process killing the agent's would spare) and makes it wait for the verifier
    to forge reward.json: the container is restarted before the verifier, so the forger is gone with the rest."""
    engine(request, sandbox)
    payload = (Path(__file__).parent / "ptrace_init.py").read_text()
    r, out = _rollout(tmp_path, f"python3 - <<'PYEOF'\n{payload}PYEOF\n", sandbox=sandbox)
    assert "pid1 now: b'/" in out and "-c" in out.split("pid1 now:")[1][:200], (r.reason, out[-1500:])   # it took pid 1
    assert r.score == 0.0, r.reason


@pytest.mark.parametrize("sandbox", BOTH)
def test_what_an_agent_leaves_for_its_verifier_is_gone_or_overwritten(request, tmp_path, sandbox):
    """A link from the work dir into /tests (dangling while the agent works, the answer once the tests are copied in)
    is removed before the verifier; a read-only copy of the verifier's own checker in a read-only dir is overwritten
    by the verifier's `cp` (root's power over files, as Docker gives it); whatever it left in /tmp or /dev/shm is
    gone. In Harbor's environment (a writable root) also: /logs/verifier made a link to a planted reward.json, the
    path the agent's last message is uploaded to made a link to the tests' test.sh, a process named to look like
    the container's first one - none of it survives into the verifier."""
    engine(request, sandbox)
    plant = ("mkdir -p /x; echo '{\"reward\": 1}' > /x/reward.json; rm -rf /logs/verifier; ln -s /x /logs/verifier; "
             "mkdir -p /run/harness-rl-verifier; ln -s /tests/test.sh /run/harness-rl-verifier/agent_output.txt; "
             "cp /bin/sleep '/tmp/x) a b 1'; (setsid '/tmp/x) a b 1' 600 &); ")
    check = ('#!/bin/bash\ncp /tests/check.py "$WORKDIR/check.py"\ncmp -s "$WORKDIR/answer.txt" /tests/expected.txt '
             '&& python3 "$WORKDIR/check.py" > "$LOGS_DIR/reward.txt" || echo 0 > "$LOGS_DIR/reward.txt"\n'
             'ls -A /tmp /dev/shm > "$LOGS_DIR/left"\n')
    files = {"expected.txt": "42\n", "check.py": "print(0)\n"}      # a checker that fails whatever is there
    r, _ = _rollout(tmp_path, plant + "ln -s /tests/expected.txt answer.txt; echo 'print(1)' > check.py; "
                    "chmod 444 check.py; touch /tmp/planted /dev/shm/planted; chmod 555 .", test_sh=check, files=files,
                    sandbox=sandbox)
    assert r.score == 0.0, r.reason
    r, _ = _rollout(tmp_path / "honest", "echo 42 > answer.txt; echo 'print(0)' > check.py; chmod 444 check.py",
                    test_sh=check.replace("print(0)", "print(1)"), files={**files, "check.py": "print(1)\n"},
                    sandbox=sandbox)
    assert r.score == 1.0, r.reason                                  # the control: the same verifier can pass


def test_a_deep_tree_and_a_log_flood_end_their_own_rollout_only(docker, tmp_path, monkeypatch):
    """3 000 nested dirs in HOME (deeper than Python's recursion) are removed with the rollout; output flooding the
    harness's log stops at its bound - the rollout ends, and run_rollout returns (a raise would lose its group): the
    harness failed after the model answered, so the flooder earns its 0 (graded as left)."""
    deep = "python3 -c \"\nimport os\nos.chdir('/home/agent')\nfor i in range(3000):\n    os.mkdir('d'); os.chdir('d')\""
    r, _ = _rollout(tmp_path, f"{deep}; echo 42 > answer.txt")
    assert r.score == 1.0 and not (tmp_path / "sandboxes" / r.id).exists(), r.reason
    monkeypatch.setitem(containers.DEFAULTS, "log_mb", 4)
    flood = ("python3 -c \"\nimport os\npid = [p for p in os.listdir('/proc') if p.isdigit() and b'relay.py' in "
             "open('/proc/%s/cmdline' % p, 'rb').read()][0]\nline = b'y' * 65535 + b'\\\\n'\n"
             "with open('/proc/%s/fd/1' % pid, 'wb') as f:\n    for i in range(160):\n        f.write(line)\"")
    task = make_task(tmp_path / "flood")
    r = asyncio.run(one(tmp_path / "flood", "mini", Upstream(command=flood), task=task, sandbox="docker", guard=False,
                        keep=True))
    log = tmp_path / "flood" / "sandboxes" / r.id / "harness.log"
    assert log.stat().st_size <= 4 << 20 and r.score == 0.0 and r.harness_failed, (log.stat().st_size, r.reason)


def test_public_rollouts_have_networks_of_their_own_and_every_sandbox_shares_one_bound(docker, tmp_path):
    """A public task's container is alone on a network made for it (no sibling, of this run or another, is on it),
    removed with it; every container's cgroup lies under harness-rl, whose totals (half the kernel's pids, three
    quarters of the memory) bound all sandboxes together."""
    task = network_task(tmp_path / "tasks", "public")
    boxes = [containers.Box.open(docker, task, containers.BASE, tmp_path / f"b{i}", f"pub-{i}-{os.getpid()}", tool_paths(),
                         offline=False) for i in range(2)]
    try:
        nets = [json.loads(docker.cli("inspect", "-f", "{{json .NetworkSettings.Networks}}", b.name).stdout)
                for b in boxes]
        assert [list(n) for n in nets] == [[b.network] for b in boxes] and boxes[0].network != boxes[1].network
        if cgroup_parent_ok():
            cg = docker.cli("exec", boxes[0].name, "cat", "/proc/1/cgroup").stdout
            own = {line.split(":", 2)[1]: line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().split()}
            assert f":pids:{own['pids'].rstrip('/')}/{CGROUP_PARENT}/" in cg, cg
            assert int((_cgroup_base()["pids"] / "pids.max").read_text()) == \
                int(Path("/proc/sys/kernel/pid_max").read_text()) // 2
    finally:
        for b in boxes:
            b.close()
    assert not any(docker.cli("network", "inspect", b.network).returncode == 0 for b in boxes)


def test_harbors_own_docker_environment_runs_the_oracle_and_the_verifier(harbor, tmp_path):
    """`tasks.py check --sandbox harbor:docker`: each task's oracle and verifier in Harbor's own DockerEnvironment
    (Harbor 0.25 in its venv, Python 3.12+, driving this daemon through Compose; the image prebuilt here): the three
    data/docker tasks and a toy task score 1 solved and 0 untouched, and a task whose oracle does nothing fails."""
    dirs = [t.path for t in load_tasks("docker")] + [ROOT / "data" / "toy" / "toy-count"]
    broken = tmp_path / "broken"
    shutil.copytree(dirs[0], broken)
    (broken / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    report = check_tasks(dirs + [broken], sandbox="harbor:docker")
    assert {str(d): [f.check for f in fs] for d, fs in report.items()} == \
        {**{str(Path(d).resolve()): [] for d in dirs}, str(broken.resolve()): [3]}, report
    assert ours(harbor) == []


def test_a_remote_harbor_type_gets_the_harness_uploaded_and_the_proxy_by_its_url(harbor, tmp_path, monkeypatch):
    """A remote type's path (daytona, modal, ...: nothing of this machine bound in), run on Harbor's docker
    environment with `MOUNTS` emptied: mini.py uploaded to its own path and run by the image's python3, its HOME
    uploaded with a config naming --proxy-url, its TMPDIR downloaded after. The URL here is one nothing answers in
    the no-network container, so mini's first request fails there: the rollout is ungraded, the log is mini's own."""
    monkeypatch.setattr(harborenv, "MOUNTS", ())
    with pytest.raises(ValueError, match="--proxy-url"):
        harborenv.resolve_sandbox("harbor:modal", [], log=None)
    with pytest.raises(ValueError, match="one URL per trainer"):
        harborenv.resolve_sandbox("harbor:modal", [], log=None, proxy_url="https://a.example,https://b.example")
    for kind, mode in (("modal", "no-network"), ("docker", "allowlist")):   # refused before anything starts
        task = network_task(tmp_path / mode, mode)
        with pytest.raises(ValueError, match=f"network_mode is.*{mode}"):
            harborenv.resolve_sandbox(f"harbor:{kind}", [task], log=None, proxy_url="https://a.example")
    up = Upstream(command="echo never")
    r = asyncio.run(one(tmp_path, "mini", up, sandbox="harbor:docker", keep=True, public="http://127.0.0.1:9/x/"))
    box = tmp_path / "sandboxes" / r.id
    assert json.loads((box / "home" / ".mini" / "config.json").read_text())["base_url"] == \
        f"http://127.0.0.1:9/x/r/{r.id}/v1"
    assert r.score is None and r.failure == "harness" and up.requests == [], r.errors
    assert "mini: API error" in (box / "harness.log").read_text() and (box / "tmp").is_dir()
    assert ours(harbor) == []
