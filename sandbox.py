"""Sandboxes: bubblewrap around an untrusted command (an agent's harness, a verifier running the agent's code).

A sandbox shows the system and the `readonly` paths read-only, its `writable` dirs and `mounts`, a fresh /tmp, /dev
and /proc (/proc/sys read-only); `hide` lays an empty tmpfs over private paths under those. It has its own PID, IPC
and UTS namespaces (all it started dies with its first process), no capabilities, and a seccomp filter against
kernel keyrings and vsock. Run as root, the command runs as `nobody`: root without capabilities still passes the
owner checks of /proc/sys. Its life: own(dirs), Popen(argv, **spawn_kw(argv)), close_fds(argv), watch(pid), and
wait_dead(kill(pid)). "dir", the fallback of resolve_sandbox("auto"), isolates nothing (DIR_WARNING).

Limits: a cgroup per sandbox (processes, memory) where this process may make one, under one whose totals bound all
sandboxes together (containers' too: CGROUP_PARENT), and a largest file (`Limits`). `rmtree`: a sandbox's dirs
removed, however deep.
Left out: a firewall where the host's network is shared (the guard's hosts rule), CPU and whole-disk limits,
seccomp rules beyond keyrings and vsock, one uid per sandbox (all share `nobody`), containers (containers.py).
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix")
SANDBOXES = ("auto", "bwrap", "dir", "docker")
AGENT_HOME, AGENT_TMP = "/home/agent", "/tmp/agent"      # HOME and TMPDIR as a sandboxed agent sees them
NOBODY = 65534           # uid and gid the sandboxed command runs as when we are root
DIR_WARNING = ("sandbox: bubblewrap cannot run here ({why}); rollouts run with --sandbox dir: their own work dir, "
               "HOME and TMPDIR, but the same user and no mount or PID isolation - an agent can read task "
               "solutions and tests, other rollouts' files and secrets, write other verifiers' reward files, and "
               "(where it gets no cgroup: not root) leave processes behind. Only the guard stands in the way (see "
               "docs/isolation.md).")


# seccomp: keyrings have no namespace and every sandbox is the same user, so a key added in one (a grader that read
# the hidden tests) is readable in all and outlives them. add_key / request_key / keyctl -> EPERM, as Docker does.
KEYRING_SYSCALLS = {0xC000003E: (248, 249, 250),      # AUDIT_ARCH_X86_64
                    0x40000003: (286, 287, 288),      # AUDIT_ARCH_I386 (32-bit code on x86_64)
                    0xC00000B7: (217, 218, 219)}      # AUDIT_ARCH_AARCH64
# socket(AF_VSOCK, ...) -> EPERM: vsock has no network namespace (on a VM it reaches the hypervisor's services).
# i386's socketcall() multiplexer is not inspected.
SOCKET_SYSCALL = {0xC000003E: 41, 0x40000003: 359, 0xC00000B7: 198}
AF_VSOCK = 40


def seccomp_filter() -> bytes:
    """The classic-BPF program for bwrap --seccomp: keyring calls, x32 calls and vsock sockets -> EPERM, else allow."""
    import struct
    LD, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06            # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    ALLOW, DENY = 0x7FFF0000, 0x00050000 | 1              # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    prog = []                                             # (code, jt, jf, k), jumps relative to the next one
    for arch, nrs in KEYRING_SYSCALLS.items():
        # symbolic: (code, k, label to jump to when true or None); labels: "sock", "deny"
        body = [(LD, 0, None)]                            # seccomp_data.nr
        if arch == 0xC000003E:
            body.append((JGE, 0x40000000, "deny"))        # the x32 ABI: its own numbering, refused
        body += [(JEQ, nr, "deny") for nr in nrs] + [(JEQ, SOCKET_SYSCALL[arch], "sock"), (RET, ALLOW, None)]
        labels = {"sock": len(body)}
        body += [(LD, 16, None), (JEQ, AF_VSOCK, "deny"), (RET, ALLOW, None)]     # seccomp_data.args[0], low half
        labels["deny"] = len(body)
        body.append((RET, DENY, None))
        body = [(code, labels[to] - i - 1 if to else 0, 0, k) for i, (code, k, to) in enumerate(body)]
        prog += [(LD, 0, 0, 4), (JEQ, 0, len(body), arch)] + body    # seccomp_data.arch; skip if another
    prog.append((RET, 0, 0, ALLOW))
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def _seccomp_fd():
    """A fresh fd holding the filter: bwrap reads it to its end, so each sandbox gets its own."""
    try:
        fd = os.memfd_create("harness-rl-seccomp", 0)
    except (AttributeError, OSError):
        return None
    os.write(fd, seccomp_filter())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _under(path, dirs):
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def bwrap_args(writable, readonly=(), hide=(), chdir=None, network=True, mounts=(), setenv=None):
    """The bwrap command prefix. mounts: (host dir, where the sandbox sees it, writable); chdir: default writable[0].
    setenv: the command's variables, set after the drop to nobody - never bwrap's own (it is root: a task's
    LD_PRELOAD would run as root). network=False: its own network namespace, loopback only."""
    # --cap-drop ALL: run as root, bwrap would keep every capability (remount /usr read-write, lift a mask);
    # as root it keeps SETUID/SETGID for the drop to nobody at the end, which clears them
    root = os.geteuid() == 0
    caps = ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"] if root else []
    args = ["bwrap", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
            "--new-session", "--cap-drop", "ALL", *caps, "--dev", "/dev", "--proc", "/proc",
            "--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
            "--perms", "1777", "--tmpfs", "/tmp"] + ([] if network else ["--unshare-net"])
    fd = _seccomp_fd()
    if fd is not None:
        args += ["--seccomp", str(fd)]              # passed by spawn_kw(argv), closed by close_fds(argv)
    shown = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
            shown.append(d)
    hidden = sorted({os.path.realpath(h) for h in hide if os.path.isdir(h)})
    tools = [t for t in sorted({os.path.realpath(t) for t in readonly}) if os.path.exists(t)]
    late = [t for t in tools if _under(t, hidden)]          # a venv inside the project: bound after the mask
    for t in [t for t in tools if t not in late]:           # sorted: a parent comes before its children
        if not _under(t, shown):
            args += ["--ro-bind", t, t]
            shown.append(t)
    for h in hidden:                                        # under any shown dir, system or tool
        if _under(h, shown):
            args += ["--tmpfs", h]
    for t in late:                                          # under a mask: bound again, after it
        if not _under(t, [u for u in late if u < t]):
            args += ["--ro-bind", t, t]
        shown.append(t)
    for d in writable:
        args += ["--bind", str(d), str(d)]
    for src, dst, rw in mounts:         # last, and over nothing shown (it would hide what lies under dst)
        over = [p for p in [*shown, *map(str, writable)] if _under(p, [str(dst)])]
        if over or not os.path.isabs(dst):
            raise ValueError(f"sandbox: cannot mount {src} at {dst}: {over[0] if over else 'not absolute'} is there")
        args += ["--bind" if rw else "--ro-bind", str(src), str(dst)]
    # bwrap copies the modes of the host dirs above a mount point (/root and pytest's dirs are 0700): let
    # nobody pass through them (they hold nothing but the way to the mount)
    parents = {str(a) for d in [*writable, *tools, *(m[1] for m in mounts)] for a in Path(d).parents
               if str(a) not in ("/", "/tmp") and not _under(str(a), shown + [str(w) for w in writable])}
    for a in sorted(parents):
        args += ["--chmod", "0755", a]
    args += ["--chdir", str(chdir or writable[0]), "--"]
    if root:
        args += [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                 "--clear-groups", "--inh-caps=-all", "--"]
    if setenv:
        args += [shutil.which("env") or "/usr/bin/env", *(f"{k}={v}" for k, v in setenv.items())]
    return args


def tool_paths(extra=()):
    """What a sandboxed command needs to run, read-only: this Python (mini, the agents' and the verifiers'
    `python3`), node (pi, opencode), and `extra` (a harness install)."""
    paths = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    node = shutil.which("node")
    if node:
        paths.add(os.path.dirname(os.path.dirname(os.path.realpath(node))))     # <prefix>/bin/node -> <prefix>
    return sorted(paths | {str(p) for p in extra})


def private_paths(*more):
    """Paths a sandbox must never show, wherever they live: the project (data/, runs/), the user's HOME."""
    return [Path(__file__).resolve().parent, Path.home(), *more]


try:        # resolved here, not in the child: an import there could wait forever on the import lock another
    import ctypes       # thread held at fork time (seen under torchrun, whose gloo threads run beside the loop)
    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):       # not Linux
    _PRCTL = None


def _die_with_parent():
    """In the child, before exec: SIGKILL it if we die, even by SIGKILL (Linux). No import, no allocation of
    ours: only async-signal-safe work is safe between fork and exec in a threaded process."""
    if _PRCTL is not None:
        _PRCTL(1, 9)            # PR_SET_PDEATHSIG, SIGKILL


def spawn_kw(argv=()):
    """Popen / create_subprocess_exec keywords: its own session (killed as a group), death with us, and the
    seccomp filter's fd of a bwrap argv. Call close_fds(argv) once it is started."""
    return {"start_new_session": True, "preexec_fn": _die_with_parent, "pass_fds": _fds(argv)}


def _fds(argv):
    return tuple(int(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a == "--seccomp")


def close_fds(argv):
    for fd in _fds(argv):
        try:
            os.close(fd)
        except OSError:
            pass


# ----------------------------------------------------------------------------- limits: a rollout cannot take the machine

# a sandbox's bounds: processes and threads, memory (None: a quarter of the machine's), the largest file it writes
LIMITS = dict(pids=4096, memory_mb=None, file_mb=4096, disk_mb=4096)


def disk_mb(paths, cap=float("inf")) -> float:
    """MB the files under `paths` take on disk (blocks; links not followed, a hard link counted each time), counted
    until past `cap`: a rollout's files, checked while its agent works (rollout.py: past its bound, it is stopped)."""
    total, stack = 0, [str(p) for p in paths]
    while stack and total <= cap * 2**20:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    total += e.stat(follow_symlinks=False).st_blocks * 512
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                except OSError:
                    pass
    return total / 2**20


def machine_mb() -> int:
    """The machine's memory in MiB."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20


def sandbox_mb(memory_mb=None) -> int:
    """One sandbox's memory: `memory_mb` (a task's), else LIMITS', else a quarter of the machine's."""
    return int(memory_mb or LIMITS["memory_mb"] or machine_mb() // 4)
_CGROUP = {}


def _cgroup_base():
    """{controller file prefix: this process's own cgroup dir} where sandboxes get cgroups of their own: cgroup v1's
    pids and memory hierarchies, or v2's one where it hands both down; {} where this process may not (not root)."""
    if "base" in _CGROUP:
        return _CGROUP["base"]
    base = {}
    try:
        mounts = {}
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            pre, _, post = line.partition(" - ")
            kind, _, opts = (post.split() + ["", "", ""])[:3]
            for c in ("pids", "memory") if kind == "cgroup" else ("v2",) if kind == "cgroup2" else ():
                if c == "v2" or c in opts.split(","):
                    mounts.setdefault(c, pre.split()[4])
        own = {c or "v2": p for _, cs, p in (x.split(":", 2) for x in Path("/proc/self/cgroup").read_text().split())
               for c in cs.split(",")}
        for c in ("pids", "memory"):
            if c in mounts and c in own and os.access(mounts[c] + own[c], os.W_OK):
                base[c] = Path(mounts[c] + own[c]) / "harness-rl"
        if not base and "v2" in mounts and "v2" in own:     # v2: hand pids and memory down to a child of ours
            top = Path(mounts["v2"] + own["v2"])
            (top / "cgroup.subtree_control").write_text("+pids +memory")
            base = {"pids": top / "harness-rl", "memory": top / "harness-rl"}
            base["memory"].mkdir(exist_ok=True)
            (base["memory"] / "cgroup.subtree_control").write_text("+pids +memory")
        for d in set(base.values()):
            d.mkdir(exist_ok=True)
            for old in d.iterdir():                         # a run killed -9 leaves its empty cgroups behind
                if old.is_dir() and not Path(f"/proc/{old.name.split('-')[0]}").exists():
                    _rmdir(old)                             # (another live run's are its own: not touched)
        # all sandboxes together (containers too: their cgroup parent is harness-rl/docker): half the pids the
        # kernel has, three quarters of the memory - however many rollouts misbehave at once, the trainer has room
        v2 = base.get("pids") == base.get("memory")
        total = {"pids": {"pids.max": int(Path("/proc/sys/kernel/pid_max").read_text()) // 2},
                 "memory": {"memory.max" if v2 else "memory.limit_in_bytes":
                            (machine_mb() << 20) // 4 * 3}}
        for c, d in base.items():
            for f, v in total[c].items():
                (d / f).write_text(str(v))
    except OSError:
        base = {}
    _CGROUP["base"] = base
    return base


CGROUP_PARENT = "harness-rl/docker"     # containers' cgroup parent: relative, so under the daemon's own cgroup


def cgroup_parent_ok() -> bool:
    """Whether containers may take CGROUP_PARENT: this process has the harness-rl cgroups (whose totals bound every
    sandbox together); a daemon started by a process of this cgroup puts them under it."""
    return bool(_cgroup_base())


def rmtree(path):
    """shutil.rmtree, ignoring errors, also through a tree deeper than Python's recursion (an agent's 3 000 nested
    dirs): then `rm -rf`."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True)


def _rmdir(d):
    try:
        d.rmdir()
        return True
    except OSError:
        return False


class Limits:
    """One sandbox's bounds: a cgroup of its own (pids.max: a fork bomb stops there; memory: an OOM kills inside it,
    never the trainer or a sibling) where this process may make one, and RLIMIT_FSIZE (the largest file a process
    may write) everywhere. Its first process enters them itself (`argv`: a shell writes its pid into the cgroup and
    execs the command); close() kills what is left in the cgroup and removes it. Not bounded here: CPU time (the
    pool's --fit shares the cores), the disk as a whole (a work dir is a host dir; --sandbox docker is the way)."""
    _seq = iter(range(1 << 62))

    def __init__(self, pids=None, memory_mb=None, file_mb=None):
        pids, file_mb = pids or LIMITS["pids"], file_mb or LIMITS["file_mb"]
        self.file_blocks, self.memory_mb, self.dirs = int(file_mb) * 2048, sandbox_mb(memory_mb), []
        name = f"{os.getpid()}-{next(self._seq)}"
        _CGROUP["left"] = [d for d in _CGROUP.get("left", []) if not _rmdir(d) and d.exists()]
        v2 = _cgroup_base().get("pids") == _cgroup_base().get("memory")
        files = {"pids": {"pids.max": pids}, "memory": {"memory.max" if v2 else "memory.limit_in_bytes":
                                                        self.memory_mb << 20}}
        for c, root in _cgroup_base().items():
            d = root / name
            try:
                d.mkdir(exist_ok=True)
                for f, v in files[c].items():
                    (d / f).write_text(str(v))
                self.dirs.append(d)
            except OSError:
                _rmdir(d)
        self.dirs = list(dict.fromkeys(self.dirs))

    def argv(self, argv):
        enter = "".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))} && " for d in self.dirs)
        return ["/bin/sh", "-c", f'{enter}ulimit -f {self.file_blocks} && exec "$@"', "sh", *argv]

    def close(self):
        for d in self.dirs:
            for _ in range(100):
                try:
                    for pid in (d / "cgroup.procs").read_text().split():
                        os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
                if _rmdir(d) or not d.exists():
                    break
                time.sleep(0.02)
            else:                           # a zombie not reaped yet: removed by a later sandbox's Limits
                _CGROUP.setdefault("left", []).append(d)


def own(*dirs):
    """Hand the writable dirs (recursively) to the user the sandbox runs as (only needed when we are root)."""
    if os.geteuid() != 0:
        return
    for d in dirs:
        os.chmod(d, 0o755)          # bwrap (root, but without DAC capabilities) must enter it
        for root, subdirs, files in os.walk(d):
            for name in [root] + [os.path.join(root, n) for n in subdirs + files]:
                os.lchown(name, NOBODY, NOBODY)


_REAPER_CODE = """
import json, os, signal, subprocess, sys
groups, dockers = set(), []
for line in sys.stdin:
    if line[0] == "d":
        dockers.append(json.loads(line[1:]))
    else:
        (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
for cli, pid, pidfile in dockers:     # our containers and networks; then the daemon, unless a run still uses it
    users = os.path.join(os.path.dirname(pidfile), "users")
    try:
        os.unlink(os.path.join(users, str(pid)))
    except OSError:
        pass
    try:
        if any(os.path.exists(f"/proc/{u}") for u in os.listdir(users)):
            pidfile = None
        for kind in ([], ["network"]):
            ps = subprocess.run(cli + kind + ["ls" if kind else "ps", "-q" if kind else "-aq", "--filter",
                                              f"label=harness-rl.pid={pid}"],
                                capture_output=True, text=True, timeout=60)
            ids = ps.stdout.split()
            ids and subprocess.run(cli + kind + ["rm", *([] if kind else ["-f", "-v"]), *ids], capture_output=True,
                                   timeout=300)
        left = subprocess.run(cli + ["ps", "-aq"], capture_output=True, text=True, timeout=60)
        if pidfile and left.returncode == 0 and not left.stdout.split():
            os.killpg(int(open(pidfile).read()), signal.SIGTERM)
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
"""
_reaper = {"proc": None, "lock": threading.Lock()}


def watch(pid=None, docker=None):
    """Kill the process group `pid` leads if this process dies first, even by SIGKILL: a watcher process kills the
    groups still listed (`kill` unlists one) when its pipe closes. --die-with-parent alone misses bwrap killed right
    after it cloned the namespace's init, which then waits forever. docker: (a daemon's CLI argv, its pid file): the
    containers and networks labelled with our pid are removed (containers.py), then the daemon is stopped if no
    other live process uses it (a file named by its pid in `users/` beside the pid file) and no container is left
    on it: whichever run started it, the last one out stops it."""
    with _reaper["lock"]:
        if _reaper["proc"] is None or _reaper["proc"].poll() is not None:
            _reaper["proc"] = subprocess.Popen([sys.executable, "-I", "-c", _REAPER_CODE], stdin=subprocess.PIPE,
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                               start_new_session=True)
        if docker:
            import json
            _tell_reaper("d" + json.dumps([list(docker[0]), os.getpid(), str(docker[1])]))
        if pid:
            _tell_reaper(f"+{pid}")


def _tell_reaper(line):
    try:
        _reaper["proc"].stdin.write(line.encode() + b"\n")
        _reaper["proc"].stdin.flush()
    except (OSError, ValueError, AttributeError):       # no watcher (nothing watched yet), or it is gone
        pass


def kill(pid):
    """SIGKILL a process group and the processes its leader started directly (under bwrap: the sandbox's init,
    whose death ends its PID namespace). Returns those pids, for `wait_dead`."""
    with _reaper["lock"]:
        _tell_reaper(f"-{pid}")
    pids = children(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return pids


def children(pid):
    try:
        return [int(c) for f in Path(f"/proc/{pid}/task").glob("*/children") for c in f.read_text().split()]
    except OSError:
        return []


def running(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")       # a zombie has run its last instruction


def wait_dead(pids, timeout=10.0):
    """Until every pid is dead (a killed sandbox init turns zombie only once its whole namespace is gone)."""
    deadline = time.monotonic() + timeout
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


async def pipe(reader, writer):
    """Copy one direction of a connection until EOF, then half-close: a rollout's Unix socket forwarded to its proxy
    (rollout.py). relay.py, inside the sandbox, has its own copy: the sandbox shows that file alone."""
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


def read_untrusted(path, limit=65536, tail=False) -> bytes:
    """A file a sandbox could have written, read by us (maybe as root): not through a link (to a solution, to
    /proc/self/environ), only a regular file (a FIFO blocks, /dev/zero fills memory), at most `limit` bytes (the last
    ones with tail=True). Raises OSError (ELOOP for a link) or ValueError (not a regular file)."""
    import stat
    if not stat.S_ISREG(os.lstat(path).st_mode):      # before it is opened: a device node's open can act (as root)
        raise ValueError(f"{path}: not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file")
        if tail and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        chunks, left = [], limit
        while left > 0:
            b = os.read(fd, min(left, 1 << 16))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


_CHECK = {}


def bwrap_works():
    """(ok, why not): whether bubblewrap builds a sandbox here, as it will run (checked once per process). A
    sandbox whose /proc/sys is writable does not count: that is a way out."""
    if "ok" not in _CHECK:
        if shutil.which("bwrap") is None:
            _CHECK["ok"] = (False, "bwrap is not installed: apt-get install bubblewrap")
        elif os.geteuid() == 0 and shutil.which("setpriv") is None:
            _CHECK["ok"] = (False, "run as root, the sandbox drops to nobody with setpriv (util-linux), not found")
        else:
            with tempfile.TemporaryDirectory() as d:
                own(d)
                probe = "test -d /proc/self && ! test -w /proc/sys/kernel/core_pattern && touch ok"
                argv = bwrap_args([d], tool_paths()) + ["/bin/sh", "-c", probe]
                try:
                    p = subprocess.run(argv, capture_output=True, text=True, timeout=30, **spawn_kw(argv))
                    ok = os.path.exists(os.path.join(d, "ok"))
                    _CHECK["ok"] = (ok, "" if ok else (p.stderr.strip() or "/proc/sys is writable inside "
                                                       f"(exit code {p.returncode})")[:200])
                except (OSError, subprocess.TimeoutExpired) as e:
                    _CHECK["ok"] = (False, str(e)[:200])
                finally:
                    close_fds(argv)
    return _CHECK["ok"]


def docker_missing() -> str | None:
    """Why this machine cannot run --sandbox docker (one line), or None."""
    if not shutil.which("dockerd"):
        return "dockerd is not installed: apt-get install docker.io (Debian's 20.10 is what CI uses)"
    if os.geteuid() != 0:
        return "dockerd needs root here (this project starts a daemon of its own: containers.py)"
    return None


def resolve_sandbox(mode):
    """--sandbox auto|bwrap|dir|docker -> (mode to use, warning or ""). auto: bwrap where it works, else dir with
    a warning; bwrap or docker where it cannot run: an error."""
    if mode.startswith("harbor:"):      # Harbor's environments (harborenv.resolve_sandbox checks the rest)
        return mode, ""
    if mode not in SANDBOXES:
        raise ValueError(f"--sandbox must be one of {', '.join(SANDBOXES)}, got {mode!r}")
    if mode == "dir":
        return "dir", ""
    if mode == "docker":
        if why := docker_missing():
            raise RuntimeError(f"--sandbox docker: {why}")
        return "docker", ""
    ok, why = bwrap_works()
    if ok:
        return "bwrap", ""
    if mode == "bwrap":
        raise RuntimeError(f"--sandbox bwrap: bubblewrap cannot run here: {why}")
    return "dir", DIR_WARNING.format(why=why)
