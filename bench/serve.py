"""The embedded server's continuous batching: 48 concurrent streaming sessions vs the same 48 requests one
at a time, on a tiny checkpoint (CPU by default). Same prompts and seeds in both runs, so the same tokens
are generated; prints completion tokens/s, the ratio, and time to first token (median / p90).

    python bench/serve.py [--sessions 48] [--max-tokens 64] [--model-type lfm3]
"""
import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import serve as S  # noqa: E402
import tiny  # noqa: E402


async def session(url, i, args):
    body = {"messages": [{"role": "system", "content": "You are a coding agent."},
                         {"role": "user", "content": f"Task {i}: list the files and count the lines."}],
            "max_tokens": args.max_tokens, "seed": i, "stream": True, "temperature": 1.0}
    t0, ttft, tokens = time.perf_counter(), None, 0
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/chat/completions", json=body) as r:
            async for line in r.content:
                line = line.decode().strip()
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
                elif ttft is None and chunk["choices"] and chunk["choices"][0]["logprobs"] is None \
                        and "role" not in chunk["choices"][0]["delta"]:
                    ttft = time.perf_counter() - t0
    return tokens, ttft if ttft is not None else time.perf_counter() - t0


async def sequential(url, args):
    return [await session(url, i, args) for i in range(args.sessions)]


async def concurrent(url, args):
    return await asyncio.gather(*(session(url, i, args) for i in range(args.sessions)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--model-type", default="lfm3")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = tiny.write_tiny_checkpoint(tmp, args.model_type)
        h = S.start_local(ckpt, max_batch=max(64, args.sessions))
        try:
            asyncio.run(session(h.url, 0, args))      # warm-up
            rows = {}
            for name, fn in (("one at a time", sequential), (f"{args.sessions} concurrent", concurrent)):
                t0 = time.perf_counter()
                res = asyncio.run(fn(h.url, args))
                wall = time.perf_counter() - t0
                tokens = sum(t for t, _ in res)
                ttfts = sorted(x for _, x in res)
                rows[name] = (tokens, wall, statistics.median(ttfts), ttfts[int(0.9 * (len(ttfts) - 1))])
        finally:
            h.stop()
    print(f"# embedded server, tiny {args.model_type} checkpoint, {args.sessions} sessions x up to "
          f"{args.max_tokens} tokens, CPU")
    print(f"{'mode':<16}{'tokens':>8}{'wall s':>9}{'tokens/s':>10}{'speed-up':>10}{'TTFT p50 ms':>13}{'p90 ms':>9}")
    base = None
    for name, (tokens, wall, p50, p90) in rows.items():
        base = base or tokens / wall
        print(f"{name:<16}{tokens:>8}{wall:>9.2f}{tokens / wall:>10.0f}{tokens / wall / base:>9.1f}x"
              f"{p50 * 1e3:>13.0f}{p90 * 1e3:>9.0f}")


if __name__ == "__main__":
    main()
