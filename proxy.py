"""The guard proxy: the OpenAI-compatible HTTP server every harness calls, in front of the inference server.

    proxy = Proxy(client, adapter=lambda: ("pi-v3", 3), sampling={"temperature": 0.8, "max_tokens": 256})
    await proxy.start(); proxy.register(r, work_dir, home, tmp)     # the harness: proxy.base_url(r), key r.secret

Each rollout has its own base URL `/r/<id>/v1` and secret. A request goes to the server with the adapter of the
moment, the run's temperature and top_p, the lower of the harness's max_tokens and the run's, and token ids and
logprobs asked for; every tool call in the answer passes the guard (a blocked one becomes a text note; the reward says what that costs);
each turn is recorded as a rollout.Turn exactly as the server returned it (requests without tools are answered, not
trained on). A failed request, or a reply without token ids or a logprob per token, is the server's fault: the
rollout is ungraded; a prompt over the model's context ends the session, graded. An agent in its own network
namespace comes in through a Unix socket of its rollout (relay.py serves it inside the sandbox). The rollout
itself: rollout.py.

Left out: other endpoints (completions, responses, models: 404), streaming from the server (a streaming harness
gets the whole answer as server-sent events once it is done), n > 1, the harness's own sampling settings but its
max_tokens, a tool_choice that names a function.
"""
from __future__ import annotations

import asyncio
import collections
import hmac
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from aiohttp import web

import sandbox
from guard import guard_for
from rollout import POLICY, Rollout, Turn
from servers import MAX_BODY, ChatStream

CONTEXT_ERROR = "maximum context length"
MAX_CONNECTIONS = 32     # at once, per rollout, through its Unix socket (a harness keeps a few)


class Proxy:
    """adapter(): (model name to send the server, its version). sampling: the run's temperature, top_p and
    max_tokens (the ceiling on a harness's own limit); one left out is left to the server (OpenAI's defaults).
    guard=False turns the checks off (eval.py's ablation); calls are still counted."""

    def __init__(self, client, adapter, sampling=None, timeout=600, guard=True):
        self.client, self.adapter, self.timeout, self.guard_on = client, adapter, timeout, guard
        self.sampling = dict(sampling or {})
        self.rollouts, self.url, self._runner, self.socket_dir, self.public = {}, None, None, None, None
        self.in_use = collections.Counter()     # adapter name -> requests in flight on the server
        self.overhead = collections.deque(maxlen=100000)   # seconds per request spent in the proxy itself

    async def start(self, host="127.0.0.1", port=0, public=None):
        """Listen on host:port; public: the URL a sandbox elsewhere reaches it at (a tunnel to it, --proxy-url)."""
        self.public = public or None
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/r/{rid}/v1/chat/completions", self.chat)
        app.router.add_route("*", "/{tail:.*}", self.not_found)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError as e:
            await self._runner.cleanup()
            raise ValueError(f"the guard proxy cannot listen on {host}:{port} (--proxy-port): {e.strerror}") from None
        self.url = f"http://{host}:{self._runner.addresses[0][1]}"
        # where the Unix sockets of agents in their own network namespace live (/tmp: a long $TMPDIR would pass
        # AF_UNIX's 108-byte limit)
        self.socket_dir = tempfile.mkdtemp(prefix="harness-rl-proxy-", dir="/tmp" if os.path.isdir("/tmp") else None)
        return self.url

    async def stop(self):
        if self._runner:
            await self._runner.cleanup()
        if self.socket_dir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)

    async def open_socket(self, r: Rollout):
        """One rollout's way in from its own network namespace (bound into its sandbox, served there by relay.py): a
        Unix socket forwarded to this proxy, MAX_CONNECTIONS at once (not the trainer's file descriptors)."""
        forwards, path = set(), os.path.join(self.socket_dir, f"{r.id}.sock")

        async def forward(reader, writer):
            if len(forwards) >= MAX_CONNECTIONS:
                return writer.close()
            forwards.add(task := asyncio.current_task())    # held here (else collected while pending), cancelled at end
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.url.rsplit("/", 1)[1].split(":"))
                await asyncio.gather(sandbox.pipe(reader, up_writer), sandbox.pipe(up_reader, writer))
                up_writer.close()
            except (OSError, asyncio.CancelledError):   # cancelled as its rollout ends: asyncio's stream callback
                pass                                     # would print each cancelled handler's traceback (3.11)
            finally:
                forwards.discard(task)
                writer.close()
        server = await asyncio.start_unix_server(forward, path)
        os.chmod(path, 0o666)               # the sandbox's user connects to it (its dir stays 0700)
        server.forwards = forwards
        return server, path

    def base_url(self, rollout: Rollout, remote=False):
        """A rollout's base URL; remote: as a sandbox elsewhere reaches this proxy (`public`, --proxy-url)."""
        if remote and not self.public:
            raise ValueError("a remote sandbox reaches the proxy by a URL: --proxy-url")
        return f"{self.public.rstrip('/') if remote else self.url}/r/{rollout.id}/v1"

    def register(self, r: Rollout, work_dir=None, home=None, tmp=None, private=()):
        """work_dir (as the agent sees it) / home / tmp: the rollout's own (the guard judges paths against them,
        its config with the secret in home); private: dirs no rollout may touch but its own (all sandboxes, the run)."""
        task_dir = getattr(r.task, "path", None)
        r.guard_context = {"guard": getattr(r.task, "guard", None) or {}, "proxy_host": self.url,
                           "work_dir": str(work_dir) if work_dir else None, "home": str(home) if home else None,
                           "tmp": str(tmp) if tmp else None, "private": [str(p) for p in private],
                           "task_dir": str(Path(task_dir).resolve()) if task_dir else None}
        r.guard = guard_for(r.guard_context).session()
        self.rollouts[r.id] = r

    def unregister(self, r: Rollout):
        self.rollouts.pop(r.id, None)

    async def not_found(self, request):
        return web.json_response({"error": {"message": "not found"}}, status=404)

    async def chat(self, request):
        t0 = time.perf_counter()
        upstream = [0.0]
        try:
            return await self._chat(request, upstream)
        finally:
            self.overhead.append(time.perf_counter() - t0 - upstream[0])

    async def _chat(self, request, upstream):
        r = self.rollouts.get(request.match_info["rid"])
        auth = request.headers.get("Authorization", "").encode()
        if r is None or not hmac.compare_digest(auth, f"Bearer {r.secret}".encode()):
            return web.json_response({"error": {"message": "unknown rollout or bad key"}}, status=401)
        try:
            body = await request.json()
            messages = body["messages"]
            assert isinstance(messages, list) and isinstance(body.get("tools") or [], list)
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": {"message": f"body over {MAX_BODY} bytes"}}, status=400)
        except Exception:
            return web.json_response({"error": {"message": "expected a JSON chat request with messages"}}, status=400)
        tools = body.get("tools") or None
        name, version = self.adapter()
        # the harness's own limit counts only if it is a sane one; the trainer's is the ceiling either way
        asked = [v for v in (body.get("max_completion_tokens"), body.get("max_tokens"))
                 if isinstance(v, int) and not isinstance(v, bool) and v > 0]
        limits = asked[:1] + [self.sampling["max_tokens"]] if "max_tokens" in self.sampling else asked[:1]
        req = {"model": name, "messages": messages, "stream": False, "logprobs": True, "top_logprobs": 0,
               "return_token_ids": True,
               "user": r.id, **{k: v for k, v in self.sampling.items() if k in ("temperature", "top_p")}}
        if limits:
            req["max_tokens"] = min(limits)
        if tools:
            req["tools"] = tools
            if isinstance(body.get("tool_choice"), str):
                req["tool_choice"] = body["tool_choice"]
        try:
            t_up = time.perf_counter()
            self.in_use[name] += 1      # taken in the same loop tick as adapter(): an unload cannot slip between
            r.waiting_on_model(True)    # the agent's clock stops while its request is at the server
            try:
                resp = await asyncio.wait_for(self.client.chat(req), self.timeout)
            finally:
                r.waiting_on_model(False)
                upstream[0] = time.perf_counter() - t_up
                self.in_use[name] -= 1
                if not self.in_use[name]:
                    del self.in_use[name]
            choice, msg, finish = _read_reply(resp)
        except Exception as e:
            text = str(e)
            if self.rollouts.get(r.id) is not r:       # it ended (timed out) while this request was out
                return web.json_response({"error": {"message": "rollout ended"}}, status=400)
            if CONTEXT_ERROR in text:     # the session outgrew the context: end it normally, still graded
                msg, finish, resp, choice = {"role": "assistant", "content": "[context limit reached]",
                                             "tool_calls": []}, "length", {"usage": {}}, None
            else:
                r.errors.append(f"server: {text[:300]}")
                r.failure = r.failure or "server"
                # a 4xx, not a 5xx: harnesses retry 5xx for minutes (opencode up to ~75 s); the rollout is
                # ungraded anyway, so let the harness stop now
                return web.json_response({"error": {"message": "model request failed", "type": "invalid_request"}},
                                         status=400)
        if self.rollouts.get(r.id) is not r:           # graded already: nothing may change it now
            return web.json_response({"error": {"message": "rollout ended"}}, status=400)
        if tools and choice is not None:
            r.tools = tools
            judged = self._guard(r, msg, tools, messages)
            if not msg["tool_calls"] and finish == "tool_calls":
                finish = "stop"
            lps = [x["logprob"] for x in choice["logprobs"]["content"]]
            r.turns.append(Turn(resp["prompt_token_ids"], choice["token_ids"], lps, version))
            r.exchanges.append((messages, msg, len(r.turns) - 1, judged))
        elif choice is not None:
            r.aux_requests += 1
        r.final_message = msg.get("content") or ""        # what the harness gets, notes included
        usage = resp.get("usage") or {}
        if body.get("stream"):
            return await self._sse(request, msg, finish, usage, body)
        out = {"id": resp.get("id", f"chatcmpl-{uuid.uuid4().hex}"), "object": "chat.completion",
               "created": int(time.time()), "model": body.get("model") or name,
               "choices": [{"index": 0, "message": {k: v for k, v in msg.items() if v or k == "content"},
                            "finish_reason": finish}], "usage": usage}
        return web.json_response(out)

    def _guard(self, r: Rollout, msg, tools, messages):
        """Each tool call through the guard; a blocked one is removed and its note added to the content. -> every
        call the model made, with its verdict (None: allowed or not checked), for the ATIF record."""
        kept, notes, judged = [], [], []
        for call in msg["tool_calls"]:
            r.tool_calls += 1
            v = r.guard.check(call, tools, messages) if self.guard_on else None
            judged.append((call, None if v is None or v.allowed else v))
            if v is None or v.allowed:
                kept.append(call)
            else:
                notes.append(v.note)
                r.verdicts.append({"call": call, "rule": v.rule, "note": v.note})
        if notes:
            msg["content"] = "\n".join(filter(None, [msg.get("content")] + notes))
            msg["tool_calls"] = kept
        return judged

    async def _sse(self, request, msg, finish, usage, body):
        stream = await ChatStream().open(request, body.get("model") or POLICY)
        await stream.send({"role": "assistant", "content": ""})
        await stream.end(msg.get("content"), msg["tool_calls"], finish,
                         usage if (body.get("stream_options") or {}).get("include_usage") else None)
        return stream.resp


def _read_reply(resp):
    """(choice, assistant message, finish reason) from the server's reply, checked: token ids, one logprob per
    token, well-formed tool calls (a missing id gets one). Raises ValueError naming what is wrong (a server fault)."""
    choice = (resp.get("choices") or [None])[0] if isinstance(resp, dict) else None
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise ValueError("server reply has no choices[0].message")
    ids, prompt = choice.get("token_ids"), resp.get("prompt_token_ids")
    if not (isinstance(ids, list) and isinstance(prompt, list) and prompt):
        raise ValueError("server reply has no token_ids / prompt_token_ids (vLLM needs return_token_ids: a "
                         "version that supports it)")
    lps = ((choice.get("logprobs") or {}).get("content") or []) if isinstance(choice.get("logprobs"), dict) else []
    if len(lps) != len(ids) or not all(isinstance(x, dict) and isinstance(x.get("logprob"), (int, float))
                                       for x in lps):
        raise ValueError(f"server reply has {len(lps)} logprobs for {len(ids)} tokens")
    calls = choice["message"].get("tool_calls") or []
    if not isinstance(calls, list):
        raise ValueError("server reply: tool_calls is not a list")
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or \
                not isinstance(fn.get("arguments", ""), (str, dict)):
            raise ValueError(f"server reply: malformed tool call {json.dumps(c)[:200]}")
        if not isinstance(c.get("id"), str) or not c["id"]:
            c["id"] = f"call_{uuid.uuid4().hex[:24]}"          # the harness pairs results with calls by id
        if isinstance(fn.get("arguments"), dict):
            fn["arguments"] = json.dumps(fn["arguments"])
        fn.setdefault("arguments", "")
    content = choice["message"].get("content")
    msg = {"role": "assistant", "content": content if isinstance(content, str) else None, "tool_calls": list(calls)}
    return choice, msg, choice.get("finish_reason") or "stop"
