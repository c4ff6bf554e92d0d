"""harnesses.py: the configs each harness gets (unit), and the real pi / opencode / hermes binaries plus mini.py
driven one-shot against a scripted OpenAI-compatible server (integration: `python harnesses.py install`)."""
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from aiohttp import web

import harnesses
import mini
from conftest import free_port

SECRET = "rollout-secret-7f3a"
RID = "rid-0001"
MODEL = "policy-v3"
BASE = "http://127.0.0.1:9/r/rid-0001/v1"
CALL_ID = "call_3f9a1c2b7d"
COMMAND = "echo 42 > answer.txt"
PROMPT = "Write the number 42 into the file answer.txt in the current directory using the shell, then say done."
LEAKS = {"OPENAI_API_KEY": "sk-leaked", "ANTHROPIC_API_KEY": "sk-ant-leaked", "OPENROUTER_API_KEY": "sk-or-leaked",
         "HF_TOKEN": "hf_leaked", "XDG_CONFIG_HOME": "/root/.config", "HERMES_HOME": "/root/.hermes"}
REAL = ["pi", "opencode", "hermes"]


@pytest.fixture
def sandbox(tmp_path):
    dirs = {d: tmp_path / d for d in ("home", "work", "tmp")}
    for d in dirs.values():
        d.mkdir()
    return dirs


def prepared(name, sandbox, base=BASE, max_tokens=4096, context=131072):
    h = harnesses.get_harness(name)
    h.prepare(sandbox["home"], sandbox["work"], sandbox["tmp"], base, SECRET, MODEL, max_tokens=max_tokens,
              context=context)
    return h


# ----------------------------------------------------------------------------- unit: configs, env, argv

def test_get_harness_knows_the_four_and_names_them_when_asked_for_another():
    assert set(harnesses.HARNESSES) == {"pi", "opencode", "hermes", "mini"}
    assert all(harnesses.get_harness(n).name == n for n in harnesses.HARNESSES)
    with pytest.raises(ValueError, match="pi, opencode, hermes, mini"):
        harnesses.get_harness("claude")


def test_install_dir_is_pinned_and_follows_the_cache_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_RL_CACHE", str(tmp_path))
    assert harnesses.get_harness("pi").install_dir() == tmp_path / f"pi-0.73.1+node{harnesses.NODE}"
    assert harnesses.get_harness("opencode").install_dir() == tmp_path / "opencode-1.18.33"
    assert harnesses.get_harness("hermes").install_dir() == tmp_path / "hermes-0.19.0"
    monkeypatch.delenv("HARNESS_RL_CACHE")
    pi = f".cache/harness-rl/harnesses/pi-0.73.1+node{harnesses.NODE}"
    assert harnesses.get_harness("pi").install_dir() == Path.home() / pi


@pytest.mark.parametrize("name", list(harnesses.HARNESSES))
def test_launch_env_is_minimal_and_leaks_nothing_of_the_caller(name, sandbox, monkeypatch):
    for k, v in LEAKS.items():
        monkeypatch.setenv(k, v)
    h = prepared(name, sandbox)
    env = h.launch(PROMPT, sandbox["home"], sandbox["work"], sandbox["tmp"], RID, MODEL).env
    assert env["HOME"] == str(sandbox["home"]) and env["TMPDIR"] == str(sandbox["tmp"])
    assert env["PATH"] == os.environ["PATH"] and env["LANG"]
    assert all(env.get(k) != v for k, v in LEAKS.items()) and not any("leaked" in v for v in env.values())
    assert not {"OPENAI_API_KEY", "XDG_CONFIG_HOME"} & set(env)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())


def test_pi_writes_models_and_settings_and_runs_offline(sandbox):
    h = prepared("pi", sandbox, max_tokens=1234, context=65536)
    agent = sandbox["home"] / ".pi" / "agent"
    provider = json.loads((agent / "models.json").read_text())["providers"][harnesses.PROVIDER]
    assert provider == {"baseUrl": BASE, "api": "openai-completions", "apiKey": SECRET,
                        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                        "models": [{"id": MODEL, "contextWindow": 65536, "maxTokens": 1234}]}
    settings = json.loads((agent / "settings.json").read_text())
    assert settings == {"enableInstallTelemetry": False, "retry": {"enabled": False, "provider": {"maxRetries": 0}},
                        "compaction": {"reserveTokens": 16384}}
    h.prepare(sandbox["home"], sandbox["work"], sandbox["tmp"], BASE, SECRET, MODEL, max_tokens=1234, context=8192)
    assert json.loads((agent / "settings.json").read_text())["compaction"] == {"reserveTokens": 2048}
    assert (agent / "models.json").stat().st_mode & 0o077 == 0          # the secret is not world-readable
    launch = h.launch(PROMPT, sandbox["home"], sandbox["work"], sandbox["tmp"], RID, MODEL)
    assert launch.argv[0].endswith(f"node_modules/{harnesses.node_package()}/bin/node") and launch.argv[-1] == PROMPT
    assert launch.argv[1].endswith("pi-coding-agent/dist/cli.js")
    assert launch.argv[2:7] == ["-p", "--provider", harnesses.PROVIDER, "--model", MODEL]
    assert launch.env["NODE_COMPILE_CACHE"] == str(h.install_dir() / "node-compile-cache")
    assert {"--no-extensions", "--no-skills", "--no-prompt-templates", "--no-themes", "--no-context-files"} <= set(
        launch.argv)
    assert launch.env["PI_OFFLINE"] == "1" and launch.env["PI_SKIP_VERSION_CHECK"] == "1"
    assert launch.stdin is None


def test_pi_falls_back_to_the_system_node_where_npm_has_no_build(sandbox, monkeypatch, tmp_path):
    monkeypatch.setattr(harnesses, "node_package", lambda: None)
    monkeypatch.setenv("HARNESS_RL_CACHE", str(tmp_path))
    h = harnesses.Pi()
    assert h.install_dir() == tmp_path / "pi-0.73.1"                  # the install it always had
    npm, warm = h.install_commands(h.install_dir())
    assert not any(str(a).startswith("node-") for a in npm) and warm[-1] == "--help"
    launch = h.launch(PROMPT, sandbox["home"], sandbox["work"], sandbox["tmp"], RID, MODEL)
    assert launch.argv[0] == (shutil.which("node") or "node") and launch.argv[2] == "-p"


def test_opencode_writes_config_preseeds_the_plugin_and_makes_work_a_git_repo(sandbox):
    h = prepared("opencode", sandbox, max_tokens=1234, context=65536)
    cfg = sandbox["home"] / ".config" / "opencode"
    c = json.loads((cfg / "opencode.json").read_text())
    p = c["provider"][harnesses.PROVIDER]
    assert p["npm"] == "@ai-sdk/openai-compatible" and p["options"] == {"baseURL": BASE, "apiKey": SECRET}
    assert p["models"][MODEL] == {"name": MODEL, "tool_call": True, "limit": {"context": 65536, "output": 1234}}
    assert c["model"] == c["small_model"] == f"{harnesses.PROVIDER}/{MODEL}"
    assert c["autoupdate"] is False and c["share"] == "disabled" and c["permission"] == {"*": "allow"}
    assert json.loads((cfg / "package.json").read_text()) == {"dependencies": {"@opencode-ai/plugin": "*"}}
    assert json.loads((cfg / "package-lock.json").read_text()) == {
        "lockfileVersion": 3, "packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}
    assert (cfg / "node_modules").is_dir() and (sandbox["work"] / ".git").is_dir()
    launch = h.launch(PROMPT, sandbox["home"], sandbox["work"], sandbox["tmp"], RID, MODEL)
    assert launch.argv[1:] == ["run", "--model", f"{harnesses.PROVIDER}/{MODEL}", "--title", RID]
    assert launch.stdin == PROMPT.encode()                           # as an argument it would arrive quoted
    assert {k: launch.env[k] for k in launch.env if k.startswith("OPENCODE_")} == {
        "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}


def test_opencode_keeps_an_existing_repository(sandbox):
    subprocess.run(["git", "init", "-q", str(sandbox["work"])], check=True)
    head = (sandbox["work"] / ".git" / "HEAD").read_text()
    prepared("opencode", sandbox)
    assert (sandbox["work"] / ".git" / "HEAD").read_text() == head


def test_hermes_writes_a_yaml_config_hermes_accepts(sandbox):
    yaml = pytest.importorskip("yaml")
    h = prepared("hermes", sandbox, max_tokens=1234, context=131072)
    c = yaml.safe_load((sandbox["home"] / ".hermes" / "config.yaml").read_text())
    assert c == {"model": {"provider": harnesses.PROVIDER, "default": MODEL, "context_length": 131072, "max_tokens": 1234},
                 "providers": {harnesses.PROVIDER: {"base_url": BASE, "api_key": SECRET}},
                 "security": {"allow_lazy_installs": False}, "agent": {"api_max_retries": 1}}
    launch = h.launch(PROMPT, sandbox["home"], sandbox["work"], sandbox["tmp"], RID, MODEL)
    assert launch.argv[0].endswith("venv/bin/hermes") and "--version" not in launch.argv
    assert launch.argv[1:] == ["-z", PROMPT, "-t", "terminal,file", "--usage-file",
                               str(sandbox["tmp"] / "hermes-usage.json")]
    assert launch.env["HERMES_HOME"] == str(sandbox["home"] / ".hermes")
    assert launch.env["HERMES_DISABLE_LAZY_INSTALLS"] == "1" and launch.stdin is None


def test_hermes_context_is_raised_to_the_64000_it_requires(sandbox):
    yaml = pytest.importorskip("yaml")
    prepared("hermes", sandbox, context=8192)
    assert yaml.safe_load((sandbox["home"] / ".hermes" / "config.yaml").read_text())["model"]["context_length"] == 64000


def test_hermes_success_is_read_from_the_usage_file(sandbox):
    h, tmp = harnesses.get_harness("hermes"), sandbox["tmp"]
    assert h.succeeded(0, sandbox["home"], tmp)[0] is False                 # no usage file: it never ran
    (tmp / "hermes-usage.json").write_text(json.dumps({"completed": False, "failed": True, "failure": "HTTP 500"}))
    ok, why = h.succeeded(0, sandbox["home"], tmp)
    assert not ok and "HTTP 500" in why
    (tmp / "hermes-usage.json").write_text(json.dumps({"completed": True, "failed": False}))
    assert h.succeeded(0, sandbox["home"], tmp)[0] is True
    assert h.succeeded(1, sandbox["home"], tmp)[0] is False
    # the usage file lies in the agent's tmp: a link (to /dev/zero: memory) or a FIFO (a read that never
    # returns, on the trainer's event loop) is "not readable", at once
    for make in (lambda p: p.symlink_to("/dev/zero"), lambda p: os.mkfifo(p)):
        (tmp / "hermes-usage.json").unlink()
        make(tmp / "hermes-usage.json")
        ok, why = h.succeeded(0, sandbox["home"], tmp)
        assert not ok and "no readable usage file" in why


@pytest.mark.parametrize("name", ["pi", "opencode", "mini"])
def test_exit_code_decides_for_the_others(name, sandbox):
    assert harnesses.get_harness(name).succeeded(0, sandbox["home"], sandbox["tmp"]) == (True, "exit code 0")
    assert harnesses.get_harness(name).succeeded(1, sandbox["home"], sandbox["tmp"])[0] is False


@pytest.mark.parametrize("name", ["pi", "hermes"])
def test_a_prompt_that_looks_like_an_option_or_a_file_stays_a_prompt(name, sandbox):
    h = prepared(name, sandbox)
    for prompt in ("--help me", "@setup.py is broken"):
        argv = h.launch(prompt, sandbox["home"], sandbox["work"], sandbox["tmp"], RID, MODEL).argv
        assert " " + prompt in argv and prompt not in argv


def test_mini_reads_its_key_from_its_config_not_the_command_line_or_environment(sandbox):
    h = prepared("mini", sandbox, max_tokens=1234)
    config = sandbox["home"] / ".mini" / "config.json"
    assert json.loads(config.read_text()) == {"base_url": BASE, "api_key": SECRET, "model": MODEL, "max_tokens": 1234}
    assert config.stat().st_mode & 0o077 == 0                        # the secret is not world-readable
    launch = h.launch(PROMPT, sandbox["home"], sandbox["work"], sandbox["tmp"], RID, MODEL)
    assert launch.argv == [sys.executable, str(Path(mini.__file__).resolve()), "--", PROMPT]
    assert SECRET not in " ".join(launch.argv) and SECRET not in " ".join(launch.env.values())


def test_mini_tools_act_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert mini.run_tool("write", json.dumps({"path": "d/a.txt", "content": "x = 1\n"})).startswith("wrote")
    assert mini.run_tool("read", json.dumps({"path": "d/a.txt"})) == "x = 1\n"
    assert mini.run_tool("edit", json.dumps({"path": "d/a.txt", "old": "1", "new": "2"})) == "edited d/a.txt"
    assert (tmp_path / "d/a.txt").read_text() == "x = 2\n"
    assert "exactly once" in mini.run_tool("edit", json.dumps({"path": "d/a.txt", "old": "y", "new": "z"}))
    assert mini.run_tool("bash", json.dumps({"command": "cat d/a.txt; exit 3"})) == "x = 2\n\n(exit code 3)"
    assert mini.run_tool("bash", json.dumps({"command": "true"})) == "(no output)"
    assert mini.run_tool("bash", "{not json").startswith("error: JSONDecodeError")
    assert mini.run_tool("read", json.dumps({"path": "missing"})).startswith("error: FileNotFoundError")
    assert mini.run_tool("bash", "{}") == "error: missing argument 'command'"
    assert mini.run_tool("python", "{}").startswith("error: unknown tool")


def test_install_failure_shows_the_installer_output_and_leaves_no_marker(tmp_path):
    class Broken(harnesses.Harness):
        name, release, package = "broken", "0.0.1", "nothing"

        def install_commands(self, root):
            return [["bash", "-c", "echo resolving; echo 'E404 no such package' >&2; exit 3"]]

        def binary(self, root):
            return root / "bin" / "broken"

    with pytest.raises(harnesses.InstallError, match="(?s)exited 3.*E404 no such package"):
        Broken().install(tmp_path, quiet=True)
    assert not (tmp_path / "broken-0.0.1").exists()


@pytest.mark.parametrize("name", ["pi", "opencode"])
def test_install_without_node_says_so(name, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(harnesses.InstallError, match="needs node and npm"):
        harnesses.get_harness(name).install(tmp_path, quiet=True)
    assert not (tmp_path / f"{name}-{harnesses.get_harness(name).release}").exists()


def test_concurrent_installs_run_the_installer_once(tmp_path):
    class Slow(harnesses.Harness):
        name, release, package = "slow", "1.0", "slow"

        def install_commands(self, root):
            return [["bash", "-c", f"sleep 0.5; mkdir -p {root}/bin; echo >> {tmp_path}/runs; touch {root}/bin/slow"]]

        def binary(self, root):
            return root / "bin" / "slow"

    roots = []
    threads = [threading.Thread(target=lambda: roots.append(Slow().install(tmp_path, quiet=True))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert roots == [tmp_path / "slow-1.0"] * 4 and (tmp_path / "runs").read_text() == "\n"
    assert (tmp_path / "slow-1.0" / harnesses.MARKER).exists()
    Slow().install(tmp_path, quiet=True)                                  # idempotent: nothing runs again
    assert (tmp_path / "runs").read_text() == "\n"


# ----------------------------------------------------------------------------- the scripted model server

class ScriptedServer:
    """An OpenAI-compatible stand-in for the model, on its own thread: first a tool call to the harness's
    shell tool writing answer.txt, then (once our tool result is back) a plain final message. `fail=True`:
    every chat request gets a 500, with `retry-after-ms: 0` so that opencode's fixed 5 retries (2-32 s
    backoff, not configurable) take a second rather than 70. Any other path is a fast 404 (hermes probes).
    Records every request."""

    def __init__(self, fail=False):
        self.fail, self.requests, self.port = fail, [], free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self.thread.start()
        assert started.wait(10)

    def _serve(self, started):
        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
        started.set()
        self.loop.run_forever()

    def close(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    @property
    def chats(self):
        return [r for r in self.requests if r["method"] == "POST" and r["path"].endswith("/chat/completions")]

    def reply(self, body):
        tools = {t["function"]["name"]: t["function"] for t in body.get("tools") or []}
        shell = next((n for n in ("bash", "terminal") if n in tools), None)
        if shell and not any(m.get("role") == "tool" for m in body["messages"]):
            schema = tools[shell].get("parameters") or {}
            args = {"command": COMMAND}
            for p in schema.get("required", []):                        # e.g. a required "description"
                if p not in args and schema["properties"][p].get("type") == "string":
                    args[p] = "write the answer"
            call = {"id": CALL_ID, "type": "function", "function": {"name": shell, "arguments": json.dumps(args)}}
            return None, [call]
        return "Done: 42 is in answer.txt.", []

    async def handle(self, request):
        raw = await request.read()
        body = json.loads(raw) if raw and request.method == "POST" else None
        self.requests.append({"method": request.method, "path": request.path, "body": body,
                              "auth": request.headers.get("Authorization")})
        if request.method != "POST" or not request.path.endswith("/chat/completions"):
            return web.Response(status=404)
        if self.fail:
            return web.json_response({"error": {"message": "scripted upstream failure", "type": "server_error"}},
                                     status=500, headers={"retry-after-ms": "0"})
        content, calls = self.reply(body)
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        finish = "tool_calls" if calls else "stop"
        head = {"id": f"chatcmpl-{len(self.requests)}", "created": int(time.time()), "model": body.get("model", "")}
        if not body.get("stream"):
            message = {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}
            return web.json_response({**head, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": message, "finish_reason": finish}]})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)

        async def send(delta=None, finish_reason=None, **extra):
            choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
            chunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant", "content": ""})
        if content:
            await send({"content": content[:5]})
            await send({"content": content[5:]})
        for i, c in enumerate(calls):
            await send({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                        "function": {"name": c["function"]["name"], "arguments": ""}}]})
            await send({"tool_calls": [{"index": i, "function": {"arguments": c["function"]["arguments"]}}]})
        await send({}, finish)
        await send(None, usage=usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


@pytest.fixture
def failing_server():
    s = ScriptedServer(fail=True)
    yield s
    s.close()


def processes_in(home: Path) -> list:
    """Pids of live (not zombie) processes whose environment has HOME=home: what the harness left running."""
    needle, pids = f"HOME={home}\0".encode(), []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z" and needle in (d / "environ").read_bytes():
                pids.append(int(d.name))
        except (OSError, IndexError):
            pass
    return pids


def run_harness(h, sandbox, server, timeout=180, flags=()):
    """prepare + launch + run in its own process group, as rollout.py does; the group is killed at the end
    and nothing of it may survive. `flags` go before mini's `--`. Returns (returncode,
    output, seconds)."""
    home, work, tmp = sandbox["home"], sandbox["work"], sandbox["tmp"]
    h.prepare(home, work, tmp, f"{server.url}/r/{RID}/v1", SECRET, MODEL, max_tokens=512, context=131072)
    launch = h.launch(PROMPT, home, work, tmp, RID, MODEL)
    at = launch.argv.index("--") if flags else 0
    launch.argv[at:at] = list(flags)
    log = tmp.parent / "harness.log"
    t0 = time.time()
    with open(log, "wb") as out:
        p = subprocess.Popen(launch.argv, env=launch.env, cwd=work, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.PIPE if launch.stdin is not None else subprocess.DEVNULL,
                             start_new_session=True)
        try:
            if launch.stdin is not None:
                p.stdin.write(launch.stdin)
                p.stdin.close()
            p.wait(timeout)
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    seconds = time.time() - t0
    time.sleep(0.2)
    left = processes_in(home)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{h.name} left processes outside its group: {left}"
    return p.returncode, log.read_text(errors="replace"), seconds


def check_solved(h, sandbox, server, rc, out):
    assert rc == 0, out
    assert h.succeeded(rc, sandbox["home"], sandbox["tmp"])[0], out
    assert (sandbox["work"] / "answer.txt").read_text().strip() == "42", out
    chats = server.chats
    assert len(chats) >= 2
    assert all(c["auth"] == f"Bearer {SECRET}" for c in chats)
    assert all(c["path"] == f"/r/{RID}/v1/chat/completions" for c in chats)
    last = chats[-1]["body"]["messages"]
    calls = [m for m in last if m["role"] == "assistant" and m.get("tool_calls")]
    results = [m for m in last if m["role"] == "tool"]
    assert calls and calls[0]["tool_calls"][0]["id"] == CALL_ID
    assert results and results[0]["tool_call_id"] == CALL_ID
    return chats


# ----------------------------------------------------------------------------- integration: the real harnesses

NETWORK_TROUBLE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "getaddrinfo",
                   "Temporary failure in name resolution", "Failed to establish a new connection",
                   "Network is unreachable", "No matching distribution found")


@pytest.fixture(scope="module", params=REAL)
def real(request):
    h = harnesses.get_harness(request.param)
    try:
        h.install()
    except harnesses.InstallError as e:
        if any(s in str(e) for s in NETWORK_TROUBLE):
            pytest.skip(f"{h.name} could not be installed without network: {str(e)[-300:]}")
        raise
    return h


@pytest.mark.integration
@pytest.mark.slow
def test_real_harness_runs_our_tool_call_and_sends_the_result_back(real, sandbox, server):
    rc, out, seconds = run_harness(real, sandbox, server)
    chats = check_solved(real, sandbox, server, rc, out)
    assert all(c["body"].get("stream") is True for c in chats)       # all three stream
    if real.name in ("pi", "opencode"):                              # no title or other side request
        assert len(chats) == 2 and all(c["body"].get("tools") for c in chats), [c["body"] for c in chats]


@pytest.mark.integration
def test_pi_runs_on_its_own_node_from_the_compile_cache_made_at_install(sandbox, tmp_path):
    """The install wrote V8's compile cache; a session reads it and, read-only as in the sandbox, writes nothing."""
    if not harnesses.node_package():
        pytest.skip("npm has no Node build for this machine: pi runs on the system's node")
    h = harnesses.get_harness("pi")
    try:
        root = h.install()
    except harnesses.InstallError as e:
        pytest.skip(f"pi could not be installed: {str(e)[-300:]}")
    cache = root / h.CACHE
    entries = sorted(p for p in cache.rglob("*") if p.is_file())
    assert len(entries) > 100, "the install made no compile cache"
    out = subprocess.run([h.node(), "--version"], capture_output=True, text=True).stdout.strip()
    assert out == f"v{harnesses.NODE}"
    before = {p: p.stat().st_mtime_ns for p in entries}
    launch = h.launch("hi", sandbox["home"], sandbox["work"], sandbox["tmp"], RID, MODEL)
    h.prepare(sandbox["home"], sandbox["work"], sandbox["tmp"], f"http://127.0.0.1:{free_port()}/v1", SECRET, MODEL,
              max_tokens=64, context=65536)
    p = subprocess.run(launch.argv, env=launch.env, cwd=sandbox["work"], capture_output=True, text=True, timeout=60)
    assert "Connection error" in p.stdout + p.stderr, p.stderr[-500:]        # it ran to its first request
    assert {q: q.stat().st_mtime_ns for q in cache.rglob("*") if q.is_file()} == before   # every module was cached


@pytest.mark.integration
@pytest.mark.slow
def test_real_harness_reports_failure_when_the_upstream_fails(real, sandbox, failing_server):
    rc, out, seconds = run_harness(real, sandbox, failing_server)
    ok, why = real.succeeded(rc, sandbox["home"], sandbox["tmp"])
    assert not ok, (rc, why, out)
    assert failing_server.chats, out
    if real.name == "pi":                                            # retries are off: one request
        assert len(failing_server.chats) == 1 and seconds < 60
    if real.name == "opencode":                                      # 1 + its 5 fixed retries
        assert len(failing_server.chats) == 6
    if real.name == "hermes":                                        # exit code 0: only the usage file knows
        assert rc == 0 and "usage file says failed" in why


# ----------------------------------------------------------------------------- integration: mini

@pytest.mark.integration
@pytest.mark.parametrize("stream", [False, True])
def test_mini_runs_our_tool_call_and_sends_the_result_back(stream, sandbox, server):
    h = harnesses.get_harness("mini")
    rc, out, _ = run_harness(h, sandbox, server, flags=["--stream"] if stream else [])
    chats = check_solved(h, sandbox, server, rc, out)
    assert len(chats) == 2 and all(bool(c["body"].get("stream")) is stream for c in chats)
    assert "Done: 42" in out


@pytest.mark.integration
def test_mini_exits_1_with_the_error_when_the_upstream_fails(sandbox, failing_server):
    h = harnesses.get_harness("mini")
    rc, out, seconds = run_harness(h, sandbox, failing_server)
    assert rc == 1 and "HTTP 500" in out and "scripted upstream failure" in out
    assert h.succeeded(rc, sandbox["home"], sandbox["tmp"])[0] is False and len(failing_server.chats) == 1


@pytest.mark.integration
def test_mini_stops_after_max_turns(sandbox, server):
    server.reply = lambda body: (None, [{"id": CALL_ID, "type": "function",
                                         "function": {"name": "bash", "arguments": json.dumps({"command": "true"})}}])
    p = subprocess.run([sys.executable, mini.__file__, "--base-url", f"{server.url}/r/{RID}/v1", "--api-key", SECRET,
                        "--model", MODEL, "--max-tokens", "512", "--max-turns", "3", PROMPT], cwd=sandbox["work"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "stopped after 3 turns" in p.stderr and len(server.chats) == 3
