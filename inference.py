"""The inference server a run uses: `start_server(kind, ...)` for train.py and eval.py alike - the embedded one
("local", in a thread of this process), vLLM (servers.py launches it), or the URL of a server someone else runs.

`Server` is the embedded server's HTTP side in front of engine.py: vLLM's OpenAI-compatible API (chat and token-id
completions, streaming, /v1/models, /health, LoRA load/unload) with vLLM's request fields, validation, response shape
and errors. It renders the chat prompt and turns the sampled tokens back into content and tool calls (chat.py).

Left out: its command line (serve.py); the decoding itself (engine.py); the vLLM launcher, the client and the SSE
writer (servers.py); n > 1, top_logprobs > 0, beam search, guided decoding (tool_choice "required" or a named function
is accepted but not enforced), preemption (a request that cannot fit the context is refused up front).
"""
from __future__ import annotations

import asyncio
import hmac
import json
import math
import os
import time
import uuid

from aiohttp import web

import checkpoint
import lora
from chat import ChatFormat
import servers
from engine import Engine, Request, RequestError, kv_budget
from servers import MAX_BODY, ChatStream, Handle, new_key

CHAT_FIELDS = {  # field -> accepted types; everything else is refused with a 400 naming the field
    "model": str, "messages": list, "tools": (list, type(None)), "tool_choice": (str, dict, type(None)),
    "temperature": (int, float, type(None)), "top_p": (int, float, type(None)), "top_k": (int, type(None)),
    "max_tokens": (int, type(None)), "max_completion_tokens": (int, type(None)), "seed": (int, type(None)),
    "stop": (str, list, type(None)), "n": (int, type(None)), "logprobs": (bool, type(None)),
    "top_logprobs": (int, type(None)), "return_token_ids": (bool, type(None)), "stream": (bool, type(None)),
    "stream_options": (dict, type(None)), "skip_special_tokens": (bool, type(None)),
    "parallel_tool_calls": (bool, type(None)), "user": (str, type(None)),
    "chat_template_kwargs": (dict, type(None)), "presence_penalty": (int, float, type(None)),
    "frequency_penalty": (int, float, type(None)),
}
COMPLETION_FIELDS = {k: v for k, v in CHAT_FIELDS.items() if k not in ("messages", "tools", "tool_choice",
                                                                        "parallel_tool_calls", "chat_template_kwargs")}
COMPLETION_FIELDS.update(prompt=(list, str), echo=(bool, type(None)))
SAMPLING_EPS = 1e-5      # vLLM's _SAMPLING_EPS: a temperature below it means greedy


async def _json(request, allowed, what):
    try:
        body = await request.json()
    except web.HTTPRequestEntityTooLarge:
        raise RequestError(f"{what}: request body exceeds {MAX_BODY} bytes") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(f"{what}: body is not valid JSON ({e})") from None
    if not isinstance(body, dict):
        raise RequestError(f"{what}: the body must be a JSON object")
    for k, v in body.items():
        if k not in allowed:
            raise RequestError(f"{what}: unknown field '{k}'")
        t = allowed[k] if isinstance(allowed[k], tuple) else (allowed[k],)
        if not isinstance(v, t) or (isinstance(v, bool) and bool not in t):     # True is an int to isinstance
            raise RequestError(f"{what}: field '{k}' has the wrong type ({type(v).__name__})")
    return body


class Server:
    """model: an already loaded CausalLM to serve (train.py shares its frozen base with the server: the
    trainer's thread trains the live adapters while this server's thread serves saved versions)."""

    def __init__(self, model_path, name=None, dtype=None, device=None, max_batch=64, max_model_len=None, model=None,
                 threads=None, api_key=None, kv_cache=0):
        self.api_key = api_key          # None: open (vLLM's default too); else every route but /health needs it
        self.path = checkpoint.resolve_model(model_path)
        self.name = name or str(model_path)
        self.model = model if model is not None else checkpoint.load_model(self.path, dtype=dtype, device=device)
        if not hasattr(self.model, "lora_routing"):
            lora.add_lora(self.model, adapters=())     # LoRA-ready from the start, no adapter yet (the base model)
        self.fmt = ChatFormat.from_checkpoint(self.path)
        self.engine = Engine(self.model, self.fmt, max_batch=max_batch, max_model_len=max_model_len, threads=threads,
                             kv_bytes=kv_budget(kv_cache, self.model.lm_head.weight.device))

    def app(self):
        @web.middleware
        async def errors(request, handler):
            try:
                return await handler(request)
            except RequestError as e:
                return web.json_response({"object": "error", "message": str(e), "type": e.kind, "param": None,
                                          "code": e.status}, status=e.status)

        @web.middleware
        async def auth(request, handler):
            # The sandboxes share the trainer's loopback: without the key (the proxy's only) an agent could sample
            # unguarded or unload the policy. Checked before routing: aiohttp routes on the percent-decoded path.
            want, got = f"Bearer {self.api_key}".encode(), request.headers.get("Authorization", "").encode()
            if self.api_key and request.path != "/health" and not hmac.compare_digest(got, want):
                return web.json_response({"error": {"message": "missing or wrong API key",
                                                    "type": "AuthenticationError", "code": 401}}, status=401)
            return await handler(request)

        app = web.Application(client_max_size=MAX_BODY, middlewares=[auth, errors])
        async def health(request):          # unhealthy once the engine thread is gone: nothing would answer
            return web.Response(text="") if self.engine.alive() else web.Response(status=503, text="engine stopped")
        app.router.add_get("/health", health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/load_lora_adapter", self.load_adapter)
        app.router.add_post("/v1/unload_lora_adapter", self.unload_adapter)
        return app

    async def models(self, request):
        now = int(time.time())
        card = lambda i, root, parent: {"id": i, "object": "model", "created": now, "owned_by": "harness-rl",  # noqa
                                        "root": root, "parent": parent, "max_model_len": self.engine.max_model_len}
        data = [card(self.name, str(self.path), None)]
        data += [card(n, p, self.name) for n, p in self.engine.adapters.items() if n not in self.engine.removing]
        return web.json_response({"object": "list", "data": data})

    async def load_adapter(self, request):
        body = await _json(request, {"lora_name": str, "lora_path": str, "load_inplace": (bool, type(None))},
                           "load_lora_adapter")
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            raise RequestError("load_lora_adapter: both 'lora_name' and 'lora_path' are required")
        exists = name in self.engine.adapters and name not in self.engine.removing
        if exists and not body.get("load_inplace"):
            raise RequestError(f"The lora adapter '{name}' has already been loaded. If you want to load the "
                               "adapter in place, set 'load_inplace' to True.")
        try:
            await self.add_adapter(name, *await asyncio.to_thread(lora.read_adapter, path), path)
        except (lora.AdapterError, OSError) as e:
            raise RequestError(f"load_lora_adapter: {e}") from None
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def unload_adapter(self, request):
        body = await _json(request, {"lora_name": str, "lora_int_id": (int, type(None))}, "unload_lora_adapter")
        name = body.get("lora_name")
        if name not in self.engine.adapters or name in self.engine.removing:
            raise RequestError(f"The lora adapter '{name}' cannot be found.", 404, "NotFoundError")
        await self.remove_adapter(name)
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")

    # -- loading in process (train.py with the embedded server: the tensors, no disk, no HTTP)
    async def add_adapter(self, name, config, tensors, path=""):
        """Install an adapter from (PEFT config, PEFT-key tensors) between decode steps; replaces one of
        the same name. Checked before anything is changed."""
        def add():
            # checked in full before the old weights go: a bad file leaves the old adapter serving
            lora.install_adapter(self.model, config, tensors, name, where=str(path or name), replace=True)
            self.engine.forget(name)      # new weights under an old name: its stored prompts are stale
            self.engine.removing.discard(name)
            self.engine.adapters[name] = str(path)
        await self.engine.command(add)

    async def remove_adapter(self, name):
        """Stop serving `name` now; its weights go once no running request uses them."""
        def remove():
            self.engine.adapters.pop(name, None)
            self.engine.removing.add(name)
        await self.engine.command(remove)

    def _adapter(self, model_name):
        if model_name in (None, self.name):
            return None
        if model_name in self.engine.adapters and model_name not in self.engine.removing:
            return model_name
        raise RequestError(f"The model `{model_name}` does not exist.", 404, "NotFoundError")

    def _request(self, body, prompt_ids, what):
        if body.get("n") not in (None, 1):
            raise RequestError(f"{what}: field 'n' must be 1")
        if body.get("top_logprobs") not in (None, 0):
            raise RequestError(f"{what}: field 'top_logprobs' > 0 is not supported (use 0)")
        for k in ("presence_penalty", "frequency_penalty"):
            if body.get(k) not in (None, 0):
                raise RequestError(f"{what}: field '{k}' is not supported")
        if not prompt_ids:
            raise RequestError(f"{what}: the prompt is empty")
        V = self.model.config.vocab_size
        if any(not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < V for t in prompt_ids):
            raise RequestError(f"{what}: field 'prompt' has token ids outside [0, {V})")
        room = self.engine.max_model_len - len(prompt_ids)
        max_tokens = next((body[k] for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None),
                          max(room, 1))
        if max_tokens < 1:      # vLLM: 400 (0 is not "the rest of the context")
            raise RequestError(f"{what}: max_tokens must be at least 1, got {max_tokens}")
        if max_tokens > room:
            raise RequestError(f"{what}: this model's maximum context length is {self.engine.max_model_len} "
                               f"tokens; the prompt has {len(prompt_ids)} and max_tokens is {max_tokens}")
        t, p, k = body.get("temperature"), body.get("top_p"), body.get("top_k")
        if t is not None and not (math.isfinite(t) and t >= 0):
            raise RequestError(f"{what}: temperature must be a finite number >= 0, got {t}")
        if p is not None and not 0 < p <= 1:          # NaN fails the comparison too
            raise RequestError(f"{what}: top_p must be in (0, 1], got {p}")
        if k is not None and k < -1:
            raise RequestError(f"{what}: top_k must be -1 (off), 0 (off) or positive, got {k}")
        seed = body.get("seed")
        if seed is not None and not -2**63 <= seed < 2**63:
            raise RequestError(f"{what}: seed must be a 64-bit signed integer, got {seed}")
        if t is not None and t < SAMPLING_EPS:
            t = 0.0                   # as vLLM: below 1e-5 is greedy (1e-300 would overflow the softmax)
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        if not all(isinstance(s, str) for s in stop):
            raise RequestError(f"{what}: field 'stop' must be a string or a list of strings")
        # omitted temperature, top_p: the OpenAI API's 1 (vLLM's too), not the recipe's (the proxy sends that)
        return Request(list(prompt_ids), self._adapter(body.get("model")), max_tokens,
                       1.0 if t is None else float(t), 1.0 if p is None else float(p), max(k or 0, 0),
                       seed, stop, set(self.fmt.eos_token_ids))

    async def _run(self, req, request):
        """Wait for a request's tokens; yields ('token', id, lp) events, then ('done', reason). If the HTTP
        client of `request` goes away, the engine stops decoding it (aiohttp does not cancel the handler)."""
        self.engine.submit(req)
        while True:
            if request.transport is None or request.transport.is_closing():
                req.cancelled = True
            try:        # a step's events come at once: what is there is taken without a timer each
                ev = req.events.get_nowait() if not req.events.empty() else \
                    await asyncio.wait_for(req.events.get(), 1.0)
            except asyncio.TimeoutError:
                if not self.engine.alive():
                    raise RequestError("the engine has stopped", 503, "ServiceUnavailableError") from None
                continue
            if ev[0] == "error":
                raise RequestError(ev[1], 500, "InternalServerError")
            yield ev
            if ev[0] == "done":
                return

    def _logprobs(self, ids, lps):
        return {"content": [{"token": self.fmt.decode([t]), "logprob": lp, "bytes": list(self.fmt.decode([t])
                .encode()), "top_logprobs": []} for t, lp in zip(ids, lps)]}

    def _text(self, req):
        """Generated text with special tokens kept (tool-call markers are special tokens in LFM2), minus
        the end-of-turn token that stopped it."""
        ids = req.out_ids[:-1] if req.out_ids and req.out_ids[-1] in req.stop_ids else req.out_ids
        return self.fmt.decode(ids)

    def _final_text(self, req):
        text = self._text(req)
        for s in req.stop:
            if s in text:
                text = text[:text.index(s)]
        return text

    async def chat(self, request):
        body = await _json(request, CHAT_FIELDS, "chat/completions")
        msgs = body.get("messages")
        if not msgs or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in msgs):
            raise RequestError("chat/completions: field 'messages' must be a non-empty list of {role, content}")
        tools = body.get("tools") or None
        try:
            prompt = self.fmt.render(msgs, tools=tools, add_generation_prompt=True,
                                     **(body.get("chat_template_kwargs") or {}))
        except Exception as e:   # a template error is the request's fault (bad roles, arguments ...)
            raise RequestError(f"chat/completions: field 'messages' could not be rendered: {e}") from None
        req = self._request(body, prompt, "chat/completions")
        parse_tools = tools is not None and body.get("tool_choice") != "none"
        model_name = body.get("model") or self.name
        want_lp, want_ids = bool(body.get("logprobs")), bool(body.get("return_token_ids"))
        if body.get("stream"):
            return await self._stream_chat(request, req, body, model_name, parse_tools, want_lp, want_ids)
        async for _ in self._run(req, request):
            pass
        content, calls, finish = self._parse(req, parse_tools, tools)
        choice = {"index": 0, "message": {"role": "assistant", "content": content, "tool_calls": calls},
                  "logprobs": self._logprobs(req.out_ids, req.out_lps) if want_lp else None,
                  "finish_reason": finish, "stop_reason": None}
        out = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
               "model": model_name, "choices": [choice], "usage": self._usage(req)}
        if want_ids:
            out["prompt_token_ids"], choice["token_ids"] = req.prompt_ids, req.out_ids
        return web.json_response(out)

    def _parse(self, req, parse_tools, tools):
        """(content, tool calls, finish reason) of a finished request."""
        text = self._final_text(req)
        if not parse_tools:
            return (self.fmt.parse_reasoning(text)[1].strip() or None), [], req.finish_reason
        content, calls = self.fmt.parse(text, tools=tools)
        return content, calls, "tool_calls" if calls and req.finish_reason == "stop" else req.finish_reason

    MARKERS = ("<|tool_call_start|>", "<tool_call>")

    def _stream_text(self, req, parse_tools):
        """The content that is certain so far: before any tool-call marker or stop string, without
        <think> blocks, and holding back what could still turn into a marker, a stop string or trailing
        whitespace - so the streamed deltas add up to the non-streamed content."""
        text = self._text(req)
        hold = list(req.stop) + (list(self.MARKERS) if parse_tools else []) + ["<think>"]
        cut = min([text.find(m) for m in hold if m in text] or [len(text)])
        text = text[:cut]
        text = text[:len(text) - max((k for m in hold for k in range(1, len(m)) if text.endswith(m[:k])), default=0)]
        return self.fmt.parse_reasoning(text.rstrip("\ufffd"))[1].strip()

    def _usage(self, req):
        return {"prompt_tokens": len(req.prompt_ids), "completion_tokens": len(req.out_ids),
                "total_tokens": len(req.prompt_ids) + len(req.out_ids)}

    async def _stream_chat(self, request, req, body, model_name, parse_tools, want_lp, want_ids):
        stream = await ChatStream().open(request, model_name, logprobs=None, **({"token_ids": []} if want_ids else {}))
        await stream.send({"role": "assistant", "content": ""}, top={"prompt_token_ids": req.prompt_ids} if want_ids
                          else None)
        sent = ""
        try:
            async for ev in self._run(req, request):
                if ev[0] != "token":
                    continue
                now = self._stream_text(req, parse_tools)
                delta = now[len(sent):] if now.startswith(sent) else ""
                sent += delta
                await stream.send({"content": delta} if delta else {}, **({"token_ids": [ev[1]]} if want_ids else {}),
                                  logprobs=self._logprobs([ev[1]], [ev[2]]) if want_lp else None)
                if stream.gone:             # the client went away: the engine drops the request at its next step
                    req.cancelled = True
            content, calls, finish = self._parse(req, parse_tools, body.get("tools"))
            usage = self._usage(req) if (body.get("stream_options") or {}).get("include_usage", True) else None
            await stream.end(content[len(sent):] if content and content.startswith(sent) else None, calls, finish,
                             usage)
        except RequestError as e:
            await stream.write({"error": {"message": str(e), "code": e.status}})
        except asyncio.CancelledError:             # the handler is cancelled (the server stops): stop decoding it
            req.max_tokens = len(req.out_ids)
            raise
        return stream.resp

    async def completions(self, request):
        body = await _json(request, COMPLETION_FIELDS, "completions")
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompt = self.fmt.encode(prompt)
        if body.get("stream"):
            raise RequestError("completions: streaming is only implemented for chat/completions")
        req = self._request(body, prompt, "completions")
        async for _ in self._run(req, request):
            pass
        choice = {"index": 0, "text": self._final_text(req), "finish_reason": req.finish_reason, "stop_reason": None,
                  "logprobs": {"tokens": [self.fmt.decode([t]) for t in req.out_ids], "token_logprobs": req.out_lps,
                               "top_logprobs": None, "text_offset": None} if body.get("logprobs") else None}
        if body.get("return_token_ids"):
            choice["prompt_token_ids"], choice["token_ids"] = req.prompt_ids, req.out_ids
        return web.json_response({"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                                  "created": int(time.time()), "model": body.get("model") or self.name,
                                  "choices": [choice], "usage": self._usage(req)})


# ----------------------------------------------------------------------------- in process

def start_local(model_path, port=0, host="127.0.0.1", api_key="new", **kw) -> Handle:
    """The embedded server in a background thread of this process (its own event loop). api_key: "new" (a
    random key, the default), a key, or None (open)."""
    srv = Server(model_path, api_key=new_key() if api_key == "new" else api_key, **kw)
    port, stop = servers.serve_in_thread(srv.app(), host, port, "embedded-server", on_stop=srv.engine.stop)
    return Handle(f"http://{host}:{port}", stop, server=srv, api_key=srv.api_key)


def start_server(kind, model_path, *, name=None, context=None, run_dir="runs/serve", model=None, threads=None,
                 rank=None, max_loras=1, gpus=None, memory=None, api_key="new", kv_cache=0, **kw) -> Handle:
    """The server of a run or an eval, serving the base as `name` (default: the path) with `context` tokens (default:
    the checkpoint's). kind: "local" (embedded; model: a loaded model to share, threads: its decode threads), "vllm"
    (log in run_dir, `max_loras` adapters of rank up to `rank`, on `gpus` with `memory` of each), or the URL of a
    server someone else runs (its key: $HARNESS_RL_API_KEY). api_key: "new" (a random one), a key, or None.
    kv_cache: the embedded engine's K/V budget in GiB (0: engine.kv_budget's share of free memory)."""
    if kind == "local":
        return start_local(model_path, model=model, name=name, max_model_len=context, threads=threads, api_key=api_key,
                           kv_cache=kv_cache)
    if kind == "vllm":
        return servers.start_vllm(model_path, run_dir, rank=rank, max_loras=max_loras, served_name=name,
                             max_model_len=context, gpus=gpus, memory=memory, api_key=api_key, **kw)
    url = kind.rstrip("/").removesuffix("/v1")
    if not servers.healthy(url):
        raise RuntimeError(f"no healthy server at {url} (GET {url}/health failed)")
    return Handle(url, lambda: None, api_key=os.environ.get("HARNESS_RL_API_KEY"))
