"""The embedded server's decode engine: one thread owns the model and decodes every request together.

Continuous batching: between decode steps the engine thread runs commands (so adapter changes never race a forward)
and prefills queued requests, up to max_batch - a long prompt in chunks of `prefill_chunk` tokens with a decode step
of the running rows between two chunks (vLLM's chunked prefill), so a 30 000-token prompt does not stall them. A step
advances every active row one token, each with its own adapter, rows in the cache's fixed slots (kvcache.py). Its K/V
has a fixed budget in bytes: a request is admitted while the batch, at its longest row, fits it; when growing rows
outgrow it the newest row is preempted - its slot freed, its request queued first, later prefilled again over prompt
+ tokens so far and continued (vLLM's recompute preemption; its tokens and logprobs stand). Sampling is one batched
pass on the model's device (`sample`: inverse-CDF at a uniform hashed from each request's seed and step, so a row
draws the same in any batch); only token ids and logprobs come back, one copy a step. Logprobs are those of the
distribution sampled from (vLLM's processed_logprobs). A recent prompt (same adapter) is not prefilled again, and a
prefill starts from the longest stored prompt it begins with. A fault ends its request alone; an error in a step
fails the active batch, serving goes on.

Left out: HTTP, validation and chat formatting (inference.py), n > 1, prefix caching at any point (a stored prompt is
continued from its end only: its conv state is there), several prompts in one prefill forward, the prefill's own
transient K/V and the prompt cache in the budget (the prompt cache has its own), swapping preempted rows out instead
of recomputing.
"""
from __future__ import annotations

import asyncio
import collections
import queue
import random
import threading
import time
from dataclasses import dataclass, field

import torch

import kvcache
import lora
from chat import ChatFormat


class RequestError(Exception):
    """A request refused or failed: its HTTP status and vLLM's error type go back to the client."""
    def __init__(self, message, status=400, kind="BadRequestError"):
        super().__init__(message)
        self.status, self.kind = status, kind


@dataclass
class Request:
    # what to decode, all from the HTTP request (inference.py fills in the API's defaults, not the recipe's)
    prompt_ids: list
    adapter: str | None
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int              # 0: off
    seed: int | None
    stop: list              # stop strings
    stop_ids: set           # stop tokens (end of turn)
    out_ids: list = field(default_factory=list)
    out_lps: list = field(default_factory=list)
    finish_reason: str | None = None
    events: asyncio.Queue | None = None     # ("token", id, logprob) ... ("done", finish_reason)
    loop: asyncio.AbstractEventLoop | None = None
    cancelled: bool = False                 # its client went away: the engine drops it at the next step
    preempted: int = 0                      # times its row gave its K/V back (it goes on from prompt + out_ids)
    admitted: int = 0                       # the engine's admission count when it joined the batch (newest: highest)
    outbox: collections.deque | None = None  # the engine's: its thread hands a step's events over at once

    def emit(self, *event):
        if self.outbox is None:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        else:
            self.outbox.append((self, event))


def _put_all(items):
    for events, event in items:
        events.put_nowait(event)


def return_freed_memory():
    """Fix glibc's mmap threshold (it grows with each large free) so the decode batch's freed blocks go back to the
    OS: without it a CPU training run grew to 24 GB of RSS for ~7 GB in use. No-op where mallopt is missing."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)    # M_MMAP_THRESHOLD = -3
    except (OSError, AttributeError):
        pass


def kv_budget(gb, device) -> float:
    """The decode cache's budget in bytes: `gb` GiB, or for 0 a share of the memory free at start - 1/8 of the
    host's available memory on a CPU (rollouts' processes and training share it), 1/4 of a GPU's free memory."""
    if gb:
        return gb * 2**30
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] / 4
    try:
        avail = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemAvailable"))
    except (OSError, StopIteration, ValueError):
        avail = 16 * 2**30
    return avail / 8


_GOLD, _C1, _C2 = (c - (1 << 64) for c in (0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb))


def _shr(x, s):
    return (x >> s) & ((1 << (64 - s)) - 1)     # a logical shift of int64 (torch's >> keeps the sign)


def _mix(x):
    """splitmix64's finalizer on int64 tensors (products wrap modulo 2**64)."""
    x = (x ^ _shr(x, 30)) * _C1
    x = (x ^ _shr(x, 27)) * _C2
    return x ^ _shr(x, 31)


def uniform(seeds, steps, device):
    """One uniform in (0, 1) per row, fp64, a pure function of (seed, step): a row's draw is the same in any batch,
    on any device, after preemption."""
    x = _mix(_mix(torch.tensor(seeds, dtype=torch.long, device=device)) +
             torch.tensor(steps, dtype=torch.long, device=device) * _GOLD)
    return (_shr(x, 11).double() + 0.5) * 2.0 ** -53


def sample(logits, temperature, top_p, top_k, seeds, steps):
    """Next tokens of a batch: logits [B, V] and per row (lists) temperature (<= 0: greedy), top_p, top_k (0: off),
    seed and step (tokens it sampled so far). Returns (tokens [B], logprobs [B]) on the logits' device - the logprob
    under the distribution actually sampled from (vLLM's processed logprobs; greedy: the plain softmax). Inverse-CDF
    sampling at a `uniform` per row: one batched pass, no per-row generator, and only ids and logprobs need leave
    the device."""
    dev, (B, V) = logits.device, logits.shape
    greedy = [t <= 0 for t in temperature]
    scale = torch.tensor([1.0 if g else float(t) for g, t in zip(greedy, temperature)], device=dev)
    lp = torch.log_softmax(logits.float() / scale[:, None], -1)
    ks = [0 if g or not 0 < k < V else k for g, k in zip(greedy, top_k)]
    if any(ks):
        kmax = max(ks)
        kth = lp.topk(kmax, -1).values.gather(1, torch.tensor([max(k, 1) - 1 for k in ks], device=dev)[:, None])
        kth = kth.masked_fill(torch.tensor([k == 0 for k in ks], device=dev)[:, None], float("-inf"))
        lp = torch.log_softmax(lp.masked_fill(lp < kth, float("-inf")), -1)
    ps = [float("inf") if g or p >= 1.0 else float(p) for g, p in zip(greedy, top_p)]
    if any(p < 1.0 for p in ps):
        p_sorted, idx = lp.exp().sort(-1, descending=True)
        drop = (p_sorted.cumsum(-1) - p_sorted) >= torch.tensor(ps, device=dev)[:, None]   # the smallest prefix
        lp = torch.log_softmax(lp.masked_fill(torch.zeros_like(drop).scatter(1, idx, drop), float("-inf")), -1)
    tok = lp.argmax(-1)
    if not all(greedy):
        cdf = lp.double().exp().cumsum(-1)      # fp64: 128 000 terms summed without drift
        u = uniform(seeds, steps, dev) * cdf[:, -1]
        drawn = torch.searchsorted(cdf, u[:, None], right=True)[:, 0].clamp_(max=V - 1)   # first cdf > u
        tok = torch.where(torch.tensor(greedy, device=dev), tok, drawn)
    return tok, lp.gather(1, tok[:, None])[:, 0]


class _Cancelled(Exception):
    """A request's client left while its prompt was being prefilled."""


class Engine:
    """One thread owns the model: admits requests, prefills them, and decodes all active rows together."""
    SHARED_MIN = 32     # fewest tokens shared with a stored prompt worth storing the shared part on its own
    MAX_BATCH = 64      # rows decoded together
    PROMPT_CACHE = 1.5e9    # bytes of K/V the prompt cache keeps
    PREFILL_CHUNK = 2048    # prompt tokens prefilled between two decode steps (vLLM's chunked prefill)

    def __init__(self, model, fmt: ChatFormat, max_batch=MAX_BATCH, max_queue=512, max_model_len=None, threads=None,
                 prompt_cache_bytes=PROMPT_CACHE, kv_bytes=None, prefill_chunk=PREFILL_CHUNK):
        self.model, self.fmt, self.threads = model, fmt, threads
        # (adapter, prompt ids) -> (prefilled batch-1 cache, last logits), LRU first, up to prompt_cache_bytes of K/V
        # (32 768 positions of SmolLM2-135M fp32; ~3M of the tiny model: every harness's system prompt, per adapter
        # version). Shared safely: Cache.extend copies rows, never writes to it.
        # K/V bytes: per position of the full attention layers, per row of the sliding layers' rings (kvcache.py)
        width = model.lm_head.weight.element_size()
        self.kv_per_token, self.ring_positions = kvcache.costs(model.config, width)[0], \
            kvcache.ring_positions(model.config, width)         # a row's rings, in positions
        per_token = max(1, self.kv_per_token)
        self.prompts, self.prompt_cache_tokens = collections.OrderedDict(), int(prompt_cache_bytes // per_token)
        # the decode batch's K/V: rows x (the longest row's positions + a row's rings) (None: unbounded); one row
        # alone always runs
        self.kv_positions = None if kv_bytes is None else max(1, int(kv_bytes // per_token))
        self.preemptions, self.admissions, self.kv_peak = 0, 0, 0    # kv_peak: most slots x (positions + rings) held
        self.prompt_hits, self.prompt_tokens = 0, 0
        self.prefix_hits, self.prefix_tokens = 0, 0     # prefills that began from a stored prompt; tokens skipped
        if model.device.type == "cpu":     # (glibc's heap: nothing to do with a GPU's memory)
            return_freed_memory()
        self.max_batch, self.max_queue = max_batch, max_queue
        self.max_model_len = max_model_len or int(model.config.raw.get("max_position_embeddings", 4096))
        self.pending, self.commands = queue.Queue(), queue.Queue()
        self.active, self.cache = [], self._new_cache()
        self.held = collections.deque()     # taken from `pending` (engine thread only): waiting for room in the budget
        self.filling, self.prefill_chunk = None, max(1, int(prefill_chunk))   # (request, its _prefill) under way
        self.interleaved = 0                # prefill chunks done while rows were decoding
        # where the engine thread's time goes (a GPU's work is counted where it is waited for: each step's sampling)
        self.busy = collections.Counter()   # decode_s, steps, rows (summed over steps), prefill_s, prefill_tokens
        self.adapters = {}          # name -> path
        self.removing = set()
        self.wake = threading.Event()
        self.outbox = collections.deque()     # (request, event) emitted in the engine thread, for _deliver
        self.running = True
        self.thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self.thread.start()

    # -- called from the event loop
    def submit(self, req: Request):
        if not self.alive():
            raise RequestError("the engine has stopped", 503, "ServiceUnavailableError")
        if self.waiting() >= self.max_queue:
            raise RequestError(f"server busy: {self.max_queue} requests waiting", 503, "ServiceUnavailableError")
        req.loop, req.events, req.outbox = asyncio.get_running_loop(), asyncio.Queue(), self.outbox
        req.seed = req.seed if req.seed is not None else random.getrandbits(63)
        self.pending.put(req)
        self.wake.set()
        return req

    async def command(self, fn, *args):
        """Run fn in the engine thread between decode steps (adapter changes never race a forward)."""
        fut = asyncio.get_running_loop().create_future()
        self.commands.put((fn, args, fut, asyncio.get_running_loop()))
        self.wake.set()
        return await fut

    def stop(self):
        self.running = False
        self.wake.set()
        self.thread.join(timeout=10)
        self._fail_all("the server is shutting down")     # waiting handlers answer now, not at their timeout
        self._deliver()

    def alive(self):
        return self.running and self.thread.is_alive()

    # -- the engine thread
    def _loop(self):
        torch.set_grad_enabled(False)
        if self.threads:              # CPU threads for this thread's ops (a trainer in the process takes the rest)
            torch.set_num_threads(self.threads)
        while self.running:
            try:
                if self.filling is None:        # an adapter never changes under a prefill half done
                    self._run_commands()
                while not self.pending.empty():
                    self.held.append(self.pending.get_nowait())
                while self.held and self.held[0].cancelled:     # its client left while it waited
                    self._abort(self.held.popleft())
                self._fill()
                idle = not self.active and self.filling is None
                if self.active:
                    self._step()
                self._deliver()
                if idle:
                    self.wake.wait(timeout=0.5)
                    self.wake.clear()
            except Exception as e:     # a bug or a fault of one batch must not end serving: fail it, go on
                import traceback
                traceback.print_exc()
                self._fail_active(f"engine error: {type(e).__name__}: {e}")
                self._deliver()

    def _deliver(self):
        """Hand the events emitted since the last call to their event loops: one wake-up per loop and step, not
        one per token and row (a self-pipe write each: ~1/8 of the engine thread's time in a CPU pi run)."""
        by_loop = {}
        while self.outbox:
            req, event = self.outbox.popleft()
            by_loop.setdefault(req.loop, []).append((req.events, event))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_put_all, items)
            except RuntimeError:        # that loop is closed: nobody is waiting for these
                pass

    def _new_cache(self):
        return self.model.new_cache(0, 256 if self.kv_positions is None else 16, budget=self.kv_positions)

    def _fail_active(self, message):
        for r in self.active:
            r.emit("error", message)
        self.active, self.cache = [], self._new_cache()

    def _fail_all(self, message):
        self._fail_active(message)
        if self.filling is not None:
            self.filling[0].emit("error", message)
            self.filling = None
        while self.held:
            self.held.popleft().emit("error", message)
        while not self.pending.empty():
            self.pending.get_nowait().emit("error", message)

    def waiting(self):
        """Requests queued, not decoding (for the event loop: an estimate, read without the engine's lock)."""
        return self.pending.qsize() + len(self.held) + (self.filling is not None)

    @staticmethod
    def _length(req):
        return len(req.prompt_ids) + len(req.out_ids)

    def _fits(self, req):
        """Whether `req` may join the batch: its rows, each at the buffers' length or the longest row's (+1: the next
        token), inside the KV budget. An empty batch takes any request (inference.py bounds one by the model's length)."""
        if not self.active or self.kv_positions is None:
            return True
        longest = max(int(self.cache.lengths.max()), self._length(req)) + 1
        return self.cache.fits(len(self.active) + 1, longest)

    def _preempt(self):
        """Give back the K/V of the newest rows until the batch's next step fits the budget (never the last row)."""
        while self.kv_positions is not None and len(self.active) > 1 and \
                len(self.active) * (int(self.cache.lengths.max()) + 1 + self.ring_positions) > self.kv_positions:
            newest = max(range(len(self.active)), key=lambda i: self.active[i].admitted)
            req = self.active[newest]
            order = self.cache.remove([newest])
            self.active = [self.active[i] for i in order]
            req.preempted += 1
            self.preemptions += 1
            self.held.appendleft(req)       # first in line: it was running

    def _run_commands(self):
        while not self.commands.empty():
            fn, args, fut, loop = self.commands.get_nowait()
            try:
                res, err = fn(*args), None
            except Exception as e:  # handed back to the awaiting request handler
                res, err = None, e
            loop.call_soon_threadsafe(lambda f=fut, r=res, e=err: f.done() or (f.set_exception(e) if e else
                                                                                   f.set_result(r)))
        for name in list(self.removing):      # unload once no running request still uses it
            if all(r.adapter != name for r in self.active + list(self.held) + list(self.pending.queue)):
                self.forget(name)
                lora.remove_adapter(self.model, name)
                self.removing.discard(name)

    def _fill(self):
        """Prefill work before the next decode step: up to `prefill_chunk` tokens while rows are decoding (a long
        prompt goes in chunks, the batch steps between them), all of it while none is; admits what fits."""
        spent = 0
        while self.running and (spent < self.prefill_chunk or not self.active):
            if self.filling is None:
                if not (self.held and len(self.active) < self.max_batch and self._fits(self.held[0])):
                    return
                req = self.held.popleft()
                self.filling = (req, self._prefill(req))
            t = time.perf_counter()
            try:
                n = next(self.filling[1])
                spent += n
                self.interleaved += bool(self.active)      # a chunk done while rows wait on it
                self.busy.update(prefill_s=time.perf_counter() - t, prefill_tokens=n)
            except StopIteration:
                self.busy.update(prefill_s=time.perf_counter() - t)
                self.filling = None
                self._run_commands()        # an adapter publish waits for one prefill at most, not all
            except Exception as e:          # joining the batch failed (its K/V copy): this request alone
                self.filling[0].emit("error", f"prefill failed: {type(e).__name__}: {e}")
                self.filling = None

    def _abort(self, req):
        req.finish_reason = "abort"
        req.emit("done", "abort")

    def _prefill(self, req: Request):
        """A generator: prefills `req` a chunk at a time (yielding the tokens each took), then samples its first
        token and has it join the batch. Its failures end it alone."""
        if req.cancelled:       # left while it waited: no prefill for nobody
            return self._abort(req)
        key = (req.adapter, tuple(req.prompt_ids) + tuple(req.out_ids))     # out_ids: a preempted row going on
        if key in self.prompts:
            self.prompts.move_to_end(key)
            cache, logits = self.prompts[key]
            self.prompt_hits += 1
        else:
            try:
                cache, logits = yield from self._compute(key, len(key[1]), req)   # decode room: the batch's slots
            except _Cancelled:      # its client left, or the server is stopping
                return self._abort(req) if req.cancelled else req.emit("error", "the server is shutting down")
            except Exception as e:  # never let one request take the engine down
                req.emit("error", f"prefill failed: {e}")
                return
            if not req.out_ids:     # a preempted row's prompt + tokens is its own, not a prompt to share
                self._remember(key, cache, logits)
        try:
            drawn = self._sample([req], logits[None])[0]
        except Exception as e:
            req.emit("error", f"sampling failed: {type(e).__name__}: {e}")
            return
        if self._accept(req, *drawn):
            self.cache.extend(cache)
            self.admissions += 1
            req.admitted = self.admissions
            self.active.append(req)

    def _compute(self, key, capacity, req):
        """A generator (`_forward`'s chunks): prefills key's prompt into a new batch-1 cache of `capacity` slots and
        returns (cache, last logits). Starts
        from the longest stored prompt it begins with; a part of >= SHARED_MIN more tokens shared with a stored prompt
        (a GRPO group's system prompt + task) is stored on its own first: a stored cache continues from its end only."""
        adapter, ids = key
        base, shared = self._longest_stored(adapter, ids)
        done = len(base[1]) if base else 0
        start = self.prompts[base][0] if base else None
        if shared >= done + self.SHARED_MIN and shared < len(ids):
            start, _ = part = yield from self._forward(start, done, ids[:shared], shared, req)
            self._remember((adapter, ids[:shared]), *part)
            done = shared
        if done:
            self.prefix_hits, self.prefix_tokens = self.prefix_hits + 1, self.prefix_tokens + done
        return (yield from self._forward(start, done, ids, capacity, req))

    def _forward(self, start, done, ids, capacity, req):
        """A generator: a copy of cache `start` (holding ids[:done]; None: an empty one) advanced over ids[done:],
        `prefill_chunk` tokens at a time while rows decode (all at once while none does), yielding each chunk's tokens;
        it returns (cache, last logits)."""
        cache = self.model.new_cache(0 if start else 1, capacity)
        if start:
            cache.extend(start)     # a copy: a stored cache is never written to
        s = done
        while s < len(ids):
            if req.cancelled or not self.running:
                raise _Cancelled
            part = ids[s:s + self.prefill_chunk] if self.active else ids[s:]
            lora.set_adapter(self.model, req.adapter)      # (a decode step between chunks sets its rows' adapters)
            hidden = self.model(torch.tensor([part], device=self.model.device), cache=cache, return_hidden=True)
            s += len(part)
            yield len(part)
        # lm_head on the last position only: the others' logits would be thrown away (CPU bench: ~1/4 of the MACs)
        return cache, self.model.lm_head(hidden[:, -1])[0].clone()

    def _longest_stored(self, adapter, ids):
        """(the longest stored prompt of `adapter` that ids begin with, or None; the most tokens ids share
        with any stored prompt of `adapter`)."""
        base, shared = None, 0
        for k in self.prompts:
            if k[0] != adapter or k[1][:1] != ids[:1]:
                continue
            n = min(len(k[1]), len(ids))
            same = n if k[1][:n] == ids[:n] else next(i for i, (a, b) in enumerate(zip(k[1], ids)) if a != b)
            shared = max(shared, same)
            if same == len(k[1]) < len(ids) and (base is None or same > len(base[1])):
                base = k
        self.prompts.move_to_end(base) if base else None      # in use: the last to go
        return base, shared

    def _slots(self, key, cache):
        """What a stored prompt holds in token positions: its cache's capacity (the prompt's length) and its rings."""
        return max(len(key[1]), getattr(cache, "cap", 0)) + self.ring_positions

    def _remember(self, key, cache, logits):
        slots = self._slots(key, cache)
        if slots > self.prompt_cache_tokens:
            return
        self.prompts[key] = (cache, logits)
        self.prompt_tokens += slots              # a running total: many short prompts must not cost O(n^2)
        while self.prompt_tokens > self.prompt_cache_tokens:
            old, (old_cache, _) = self.prompts.popitem(last=False)
            self.prompt_tokens -= self._slots(old, old_cache)

    def forget(self, adapter):
        """Drop the stored prompts of an adapter whose weights change or go (engine thread only)."""
        for key in [k for k in self.prompts if k[0] == adapter]:
            self.prompt_tokens -= self._slots(key, self.prompts.pop(key)[0])

    def _step(self):
        t = time.perf_counter()
        self._preempt()
        rows = [r.adapter for r in self.active]
        toks = torch.tensor([[r.out_ids[-1]] for r in self.active], device=self.model.device)
        try:
            lora.set_adapter(self.model, rows[0] if len(set(rows)) == 1 else rows)
            drawn = self._sample(self.active, self.model(toks, cache=self.cache)[:, -1])
        except Exception as e:    # fail these requests, keep serving
            self._fail_active(f"decode failed: {e}")
            return
        self.kv_peak = max(self.kv_peak, self.cache.slots * (self.cache.cap + self.ring_positions))
        self.busy.update(decode_s=time.perf_counter() - t, steps=1, rows=len(rows))
        gone = [i for i, r in enumerate(self.active) if not self._accept(r, *drawn[i])]
        if gone:
            # finished rows free their slots and the last rows move into them (a row copy each): reorder likewise
            order = self.cache.remove(gone)
            self.active = [self.active[i] for i in order]
        if not self.active:     # idle: give the slots back (the next batch regrows them by doubling)
            self.cache = self._new_cache()

    @staticmethod
    def _sample(reqs, logits):
        """(token, logprob, finite) per request from logits [B, V]: sampled on the logits' device, one copy back."""
        tok, lp = sample(logits, [r.temperature for r in reqs], [r.top_p for r in reqs], [r.top_k for r in reqs],
                         [r.seed for r in reqs], [len(r.out_ids) for r in reqs])
        finite = torch.isfinite(logits).all(-1)     # a diverged adapter's row: told apart, not sampled from
        out = torch.stack([tok.double(), lp.double(), finite.double()]).cpu().tolist()
        return [(int(t), lp, bool(f)) for t, lp, f in zip(*out)]

    def _accept(self, req: Request, tok: int, lp: float, finite: bool) -> bool:
        """Take the sampled token of `req`; returns whether it goes on. A request whose client left or whose
        logits are not finite (a diverged adapter) ends here, alone."""
        if req.cancelled:
            self._abort(req)
            return False
        if not finite:
            req.emit("error", f"the model produced non-finite logits (adapter {req.adapter or 'none'}: NaN or "
                              "inf weights?)")
            return False
        req.out_ids.append(tok)
        req.out_lps.append(lp)
        text = self.fmt.decode(req.out_ids) if req.stop and tok not in req.stop_ids else ""
        if tok in req.stop_ids or any(s in text for s in req.stop):
            reason = "stop"
        else:
            reason = "length" if len(req.out_ids) >= req.max_tokens else None
        req.emit("token", tok, lp)
        if reason:
            req.finish_reason = reason
            req.emit("done", reason)
        return reason is None
