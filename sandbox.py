"""Sandboxes: bubblewrap around an untrusted command (an agent's harness, a verifier running the agent's code).

    own(work, home, tmp)                       # when we are root: the dirs go to the sandbox's user
    argv = bwrap_args(writable=[work, home, tmp], readonly=tool_paths(), hide=[project, suite]) + command
    proc = Popen(argv, **spawn_kw(argv)); close_fds(argv)     # the seccomp filter's fd
    watch(proc.pid)                            # killed with us, even by SIGKILL
    pids = kill(proc.pid); wait_dead(pids)     # the whole sandbox, not only its first process

What a sandbox shows: the system read-only (SYSTEM_DIRS; /bin -> usr/bin links recreated), the `readonly`
paths (the harness install, this Python, node), the `writable` dirs, the `mounts` (a host dir shown elsewhere:
a Harbor task's work dir at its WORKDIR, /tests, /logs/verifier; taskenv.py), a fresh /tmp, /dev and /proc (with
/proc/sys and /proc/sysrq-trigger read-only). Its own PID, IPC and UTS namespaces, no capabilities, no
kernel keyrings and no vsock sockets (a seccomp filter: neither has a namespace, so keys would join all sandboxes
and vsock reach a VM's host from a sandbox with its own network); when its
first process exits the PID namespace ends and everything it started dies (daemons included). `hide`: paths
that must not show even if they lie under a shown dir (a project in /opt): an empty tmpfs goes over them.
Not mounted at all: /home, /root, /var, /run (sockets), /mnt, /srv, ... - the user's files, the project,
runs, task suites and the other sandboxes.

Run as root, the sandboxed command runs as `nobody` (65534): root without capabilities still passes the
owner checks of /proc/sys (a write to kernel/core_pattern runs a program as root outside every sandbox)
and of every root-owned file. bwrap itself stays root (it mounts from the host's view, where the sandbox
dirs may sit under 0700 dirs such as pytest's), keeps only CAP_SETUID/SETGID, and `setpriv` inside drops
to nobody, which clears those too (no_new_privs: no setuid binary gives them back). The writable dirs are
handed to nobody first (`own`). Run as any other user, the command keeps that user's uid (nothing to drop;
the namespaces still apply).

`resolve_sandbox("auto")`: bwrap where it works here (checked once, as it will run), else "dir" with a
warning. "dir" is no isolation: the same user, no mounts, no PID namespace (see DIR_WARNING).

network=False gives the sandbox its own network namespace (loopback only; rollout.py brings the proxy in through
relay.py). Left out: a firewall where the host's network is shared (the guard's hosts rule), CPU / memory limits,
seccomp rules beyond the keyrings, one uid per sandbox (they share `nobody`, kept apart by mounts and PID
namespaces), containers.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix")
SANDBOXES = ("auto", "bwrap", "dir")
NOBODY = 65534           # uid and gid the sandboxed command runs as when we are root
DIR_WARNING = ("sandbox: bubblewrap cannot run here ({why}); rollouts run with --sandbox dir: their own work dir, "
               "HOME and TMPDIR, but the same user and no mount or PID isolation - an agent can read task "
               "solutions and tests, other rollouts' files and secrets, write other verifiers' reward files, and "
               "leave processes behind. Only the guard stands in the way (see docs/isolation.md).")


# seccomp: the kernel's keyrings have no namespace - every sandbox runs as the same user, so a key added in
# one (a grader that read the hidden tests) is readable in all the others, and outlives them (red team).
# add_key / request_key / keyctl fail with EPERM, as in Docker's default profile. Syscall numbers per arch.
KEYRING_SYSCALLS = {0xC000003E: (248, 249, 250),      # AUDIT_ARCH_X86_64
                    0x40000003: (286, 287, 288),      # AUDIT_ARCH_I386 (32-bit code on x86_64)
                    0xC00000B7: (217, 218, 219)}      # AUDIT_ARCH_AARCH64
# socket(AF_VSOCK, ...) -> EPERM: vsock has no network namespace, so on a VM it would reach the hypervisor's
# services from a sandbox that has its own network (red team). i386's socketcall() multiplexer is not inspected.
SOCKET_SYSCALL = {0xC000003E: 41, 0x40000003: 359, 0xC00000B7: 198}
AF_VSOCK = 40


def seccomp_filter() -> bytes:
    """The classic-BPF program bwrap installs (--seccomp FD): keyring calls, x32 calls and vsock sockets -> EPERM,
    everything else allowed."""
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
    """The bwrap command prefix (see the top of this file); `chdir` defaults to the first writable dir.
    mounts: (host dir, where the sandbox sees it, writable) - a Harbor task's WORKDIR, /tests, /logs/verifier.
    setenv: variables for the sandboxed command only, set after the drop to nobody (`env`): a task's own (ENV,
    [environment] env) must never reach bwrap itself, which runs as root (LD_PRELOAD would run the task's code).
    network=False: its own network namespace (loopback only) - for verifiers and oracles, which need none:
    a grader running the agent's code must not pass the hidden tests to a sibling rollout still running."""
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
import os, signal, sys
groups = set()
for line in sys.stdin:
    (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
"""
_reaper = {"proc": None, "lock": threading.Lock()}


def watch(pid):
    """Kill the process group `pid` leads (a sandbox: bwrap, its namespace's init, all inside) if this process dies
    first, even by SIGKILL: a small watcher process, in a session of its own, reads the groups from a pipe and kills
    those still listed when the pipe closes (we are gone); `kill` takes a group off the list. --die-with-parent alone
    misses one case: bwrap killed right after it cloned the namespace's init, which then waits for it forever."""
    with _reaper["lock"]:
        if _reaper["proc"] is None or _reaper["proc"].poll() is not None:
            _reaper["proc"] = subprocess.Popen([sys.executable, "-I", "-c", _REAPER_CODE], stdin=subprocess.PIPE,
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                               start_new_session=True)
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
    """A file a sandbox could have written (a reward file, a log, a usage file), read by us - maybe as root:
    not through a link (it could point at a solution or /proc/self/environ), only a regular file (a FIFO
    would block us, /dev/zero exhaust memory), and at most `limit` bytes (the last ones with tail=True).
    Raises OSError (ELOOP for a link) or ValueError (not a regular file)."""
    import stat
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


def resolve_sandbox(mode):
    """--sandbox auto|bwrap|dir -> (mode to use, warning or ""). auto: bwrap where it works, else dir with a
    warning; bwrap where it does not work: an error."""
    if mode not in SANDBOXES:
        raise ValueError(f"--sandbox must be one of {', '.join(SANDBOXES)}, got {mode!r}")
    if mode == "dir":
        return "dir", ""
    ok, why = bwrap_works()
    if ok:
        return "bwrap", ""
    if mode == "bwrap":
        raise RuntimeError(f"--sandbox bwrap: bubblewrap cannot run here: {why}")
    return "dir", DIR_WARNING.format(why=why)
