"""The embedded inference server as a program: vLLM's OpenAI-compatible API over a checkpoint and its adapters.

    python serve.py --model tiny --port 8000                  # then: curl localhost:8000/v1/models
    python serve.py --model PATH --lora pi-v3=runs/r/adapters/pi-v3 --api-key KEY

Left out: the server itself (inference.py: `Server`, `start_local`, `start_server`) and the decoding (engine.py).
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import sys

from aiohttp import web

import checkpoint
import lora
import tiny
from inference import Server


async def _serve(srv, host, port):
    """Serve until interrupted; the line printed names the port really bound (--port 0: a free one)."""
    runner = web.AppRunner(srv.app(), access_log=None, shutdown_timeout=1.0)     # Ctrl-C: not 60 s of grace
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as e:
            raise SystemExit(f"serve.py: cannot listen on {host}:{port}: {e.strerror or e}") from None
        print(f"serving {srv.name} ({srv.model.config.model_type}) on http://{host}:{runner.addresses[0][1]}/v1",
              flush=True)
        await asyncio.Event().wait()
    finally:
        srv.engine.stop()
        await runner.cleanup()


def main(argv=None):
    ap = argparse.ArgumentParser(description="The embedded multi-LoRA server (vLLM's OpenAI-compatible API).")
    ap.add_argument("--model", required=True, help="as in train.py: tiny or tiny-lfm2 (a tiny random checkpoint, "
                    "written into the cache on first use), a checkpoint folder, a .gguf file, a known model name or "
                    "an HF repo id in the Hugging Face cache (required)")
    ap.add_argument("--port", type=int, default=8000, help="(default: %(default)s; 0: a free one, printed)")
    ap.add_argument("--host", default="127.0.0.1", help="(default: %(default)s, this machine only)")
    ap.add_argument("--served-model-name", default=None, help="the base model's name in requests (default: --model)")
    ap.add_argument("--max-batch", type=int, default=64, help="sequences decoded together (default: %(default)s)")
    ap.add_argument("--max-model-len", type=int, default=None,
                    help="context length (default: the checkpoint's max_position_embeddings)")
    ap.add_argument("--kv-cache", type=float, default=0, metavar="GIB",
                    help="the decode batch's K/V budget: requests wait, or the newest is preempted and resumed, "
                         "rather than grow past it (default: 0, auto: 1/8 of available memory, 1/4 of a GPU's free)")
    ap.add_argument("--lora", action="append", default=[], metavar="NAME=PATH",
                    help="adapter to load at start, repeatable (default: none)")
    ap.add_argument("--api-key", default=os.environ.get("HARNESS_RL_API_KEY"),
                    help="require `Authorization: Bearer KEY` on every route but /health (default: "
                         "$HARNESS_RL_API_KEY; unset: open, like vLLM)")
    args = ap.parse_args(argv)
    if not (math.isfinite(args.kv_cache) and args.kv_cache >= 0):
        ap.error(f"--kv-cache must be a number of GiB >= 0 (0: auto), got {args.kv_cache}")
    try:        # every bad --model or --lora is one line naming it, never a traceback
        path = tiny.model_path(args.model)
        try:
            srv = Server(path, name=args.served_model_name or args.model, max_batch=args.max_batch,
                         max_model_len=args.max_model_len, api_key=args.api_key, kv_cache=args.kv_cache)
        except checkpoint.CheckpointError:
            raise
        except (OSError, ValueError, KeyError) as e:    # e.g. a tokenizer file that does not parse
            raise checkpoint.CheckpointError(f"model {args.model!r}: {path} is not a loadable checkpoint: {e}") from None
        for spec in args.lora:
            name, eq, lpath = spec.partition("=")
            if not (name and eq and lpath):
                ap.error(f"--lora {spec!r}: expected NAME=PATH")
            lora.load_adapter(srv.model, lpath, adapter=name)
            srv.engine.adapters[name] = lpath
    except (checkpoint.CheckpointError, lora.AdapterError) as e:
        sys.exit(f"serve.py: {e}")
    # Ctrl-C stops it whatever its parent left: SIGINT ignored (a background job) or blocked (seen under pytest)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        asyncio.run(_serve(srv, args.host, args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
