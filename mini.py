"""mini: the built-in coding agent, a stdlib-only OpenAI tool-calling loop for tests and CPU demos. Its tools
(bash, read, write, edit) act in its cwd; it exits 0 when the model stops calling tools or after max turns, 1 on an
API error.

    python mini.py [--config PATH] [--base-url URL] [--api-key KEY] [--model M] [--max-tokens N]
                   [--max-turns N] [--timeout S] [--stream] PROMPT

Settings come from $HOME/.mini/config.json (harnesses.Mini.prepare writes it) or --config, flags overriding them; the
key stays in this process (no command line, no environment the tools inherit). It runs alone in the sandbox (only this
file is mounted), so it imports nothing from the project. Left out: context management, a permission layer, retries.
"""
import argparse
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

MAX_TURNS = 30
BASH_TIMEOUT = 180               # seconds per bash tool call
OUTPUT_CHARS = 16_000            # tool output kept per call (head and tail)
SYSTEM = ("You are a coding agent working in the current directory. Use the tools to inspect and change "
          "files and run commands. When the task is done, reply with a short summary and no tool call.")


TOOLS = [{"type": "function", "function": {"name": name, "description": description, "parameters": {
    "type": "object", "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
    "required": list(params)}}} for name, description, params in [
        ("bash", "Run a bash command in the working directory; returns its output and exit code.",
         {"command": "the command"}),
        ("read", "Read a text file.", {"path": "file path, relative to the working directory"}),
        ("write", "Create or overwrite a file.", {"path": "file path", "content": "the full new content"}),
        ("edit", "Replace one exact occurrence of `old` in a file by `new`.",
         {"path": "file path", "old": "text to replace (must occur exactly once)", "new": "replacement text"})]]


def _clip(text: str, n=OUTPUT_CHARS) -> str:
    return text if len(text) <= n else f"{text[:n // 2]}\n... [{len(text) - n} characters cut] ...\n{text[-n // 2:]}"


def run_tool(name: str, arguments: str) -> str:
    """Run one tool in the current directory; errors come back as text, as in the real harnesses."""
    try:
        a = json.loads(arguments or "{}")
        if name == "bash":
            p = subprocess.run(["bash", "-c", a["command"]], capture_output=True, text=True, errors="replace",
                               stdin=subprocess.DEVNULL, timeout=BASH_TIMEOUT)
            out = (p.stdout + p.stderr) or "(no output)"
            return _clip(out + (f"\n(exit code {p.returncode})" if p.returncode else ""))
        if name == "read":
            return _clip(Path(a["path"]).read_text(errors="replace"))
        if name == "write":
            path = Path(a["path"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(a["content"])
            return f"wrote {len(a['content'])} characters to {a['path']}"
        if name == "edit":
            path = Path(a["path"])
            text = path.read_text()
            if (n := text.count(a["old"])) != 1 or not a["old"]:
                return f"error: the old text occurs {n} times in {a['path']}; it must occur exactly once"
            path.write_text(text.replace(a["old"], a["new"], 1))
            return f"edited {a['path']}"
        return f"error: unknown tool {name!r}; the tools are bash, read, write, edit"
    except subprocess.TimeoutExpired:
        return f"error: the command timed out after {BASH_TIMEOUT} s"
    except KeyError as e:
        return f"error: missing argument {e}"
    except (ValueError, TypeError, OSError) as e:
        return f"error: {type(e).__name__}: {e}"


def _read_sse(response) -> dict:
    """Assemble a streamed chat completion (role / content / tool-call deltas) into one message."""
    content, calls = [], {}
    for raw in response:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("error"):
            raise ValueError(f"error in stream: {chunk['error']}")
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            for tc in delta.get("tool_calls") or []:
                c = calls.setdefault(tc.get("index", 0), {"id": "", "type": "function",
                                                          "function": {"name": "", "arguments": ""}})
                c["id"] = tc.get("id") or c["id"]
                c["function"]["name"] += (tc.get("function") or {}).get("name") or ""
                c["function"]["arguments"] += (tc.get("function") or {}).get("arguments") or ""
    return {"role": "assistant", "content": "".join(content) or None, "tool_calls": [calls[i] for i in sorted(calls)]}


def chat(c: dict, messages: list) -> dict:
    """One chat completion with the settings `c`; the assistant message."""
    body = {"model": c["model"], "messages": messages, "tools": TOOLS, "max_tokens": c["max_tokens"]}
    if c["stream"]:
        body.update(stream=True, stream_options={"include_usage": True})
    request = urllib.request.Request(c["base_url"].rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {c.get('api_key', '')}",
                                              "Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # the server is local: no http_proxy
    with opener.open(request, timeout=c["timeout"]) as response:
        return _read_sse(response) if c["stream"] else json.loads(response.read())["choices"][0]["message"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="The built-in agent: an OpenAI tool-calling loop in the current "
                                             "directory. Settings come from the config file; flags override it.")
    ap.add_argument("--config", help="JSON settings file (default: $HOME/.mini/config.json, if it exists)")
    ap.add_argument("--base-url", help="e.g. http://127.0.0.1:8000/v1 (required here or in the config)")
    ap.add_argument("--api-key", help="prefer the config: a command line is visible to every process")
    ap.add_argument("--model", help="required here or in the config")
    ap.add_argument("--max-tokens", type=int, help="per reply (required here or in the config)")
    ap.add_argument("--max-turns", type=int, help=f"default {MAX_TURNS}")
    ap.add_argument("--timeout", type=float, help="seconds per request (default 600)")
    ap.add_argument("--stream", action="store_true", default=None, help="ask for SSE chunks")
    ap.add_argument("prompt", help="the task, as the user's first message")
    args = ap.parse_args(argv)
    path = Path(args.config or Path.home() / ".mini" / "config.json")
    try:        # a missing default config is fine (flags only); a missing --config is not
        config = json.loads(path.read_text()) if args.config or path.exists() else {}
    except (OSError, ValueError) as e:
        ap.error(f"cannot read the config {path}: {e}")
    flags = {k: v for k, v in vars(args).items() if v is not None and k not in ("config", "prompt")}
    c = {"max_turns": MAX_TURNS, "timeout": 600, "stream": False, **config, **flags}
    if missing := [k for k in ("base_url", "model", "max_tokens") if k not in c]:
        ap.error(f"no {', '.join(missing)} in {path} or the flags")

    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": args.prompt}]
    for _ in range(c["max_turns"]):
        try:
            msg = chat(c, messages)
        except urllib.error.HTTPError as e:
            print(f"mini: API error: HTTP {e.code}: {e.read()[:1000].decode('utf-8', 'replace')}", file=sys.stderr)
            return 1
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            print(f"mini: API error: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        calls = msg.get("tool_calls") or []
        messages.append({"role": "assistant", "content": msg.get("content"),
                         **({"tool_calls": calls} if calls else {})})
        if not calls:
            print(msg.get("content") or "")
            return 0
        for call in calls:
            fn = call.get("function") or {}
            messages.append({"role": "tool", "tool_call_id": call.get("id", ""),
                             "content": run_tool(fn.get("name", ""), fn.get("arguments", ""))})
    print(f"mini: stopped after {c['max_turns']} turns", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
