"""The pool of concurrent rollouts of one harness: up to `max_sessions` sessions, in groups of `group_size`, each
group queued once complete (GRPO compares a task's rollouts with each other); fewer sessions while the machine cannot
run them (`Fit`, measured as the run goes); the stall check that stops a run which cannot progress.

Left out: retries of failed rollouts (simply excluded), priorities between pools, rollouts on other machines.
"""
from __future__ import annotations

import asyncio
import collections
import json
import os
import resource
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from proxy import Proxy
from rollout import Rollout, run_rollout, to_atif


class StallError(RuntimeError):
    """No graded group for --stall-timeout seconds; the message says what the rollouts since then failed on."""


@dataclass
class Group:
    task: object
    rollouts: list


class Fit:
    """How many sessions fit the machine, measured. Rollouts cost CPU in processes of their own (harness, sandbox,
    verifier); the pools may use `cpu` cores for them. Every WINDOW seconds the CPU the machine spent outside this
    process (`others_cpu`: /proc/stat's busy time less this process's own) is read as a rate and each pool's limit
    scaled by cpu / rate (their concurrency is what sets it), within [a group, the sessions asked for], at most 2x a
    window; memory caps it at `memory` bytes over the harness's peak RSS. Before a measurement: as many as start within
    WINDOW s on `cpu` cores at the harness's measured start-up cost (harnesses.Harness.cost). One Fit per run: its
    pools share the cores."""
    WINDOW = 15.0

    def __init__(self, cpu, memory):
        self.cpu, self.memory, self.pools = cpu, memory, 0
        self.mark = (time.monotonic(), others_cpu())
        self.rate = None                # cores' worth of CPU used outside this process over the last window

    @classmethod
    def machine(cls, model_on_cpu=True, model_idle=False):
        """This machine's: rollouts' processes may use half the cores while the model runs on the CPU too, all but
        one beside a GPU, all of them beside a model that costs nothing (model_idle: the oracle); half the memory
        available now."""
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        try:
            info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
            memory = int(info["MemAvailable"].split()[0]) << 10
        except (OSError, KeyError, ValueError):
            memory = 8 << 30
        cpu = cores if model_idle else cores / 2 if model_on_cpu else max(1, cores - 1)
        return cls(cpu=cpu, memory=memory // 2)

    def measure(self):
        t, c = time.monotonic(), others_cpu()
        if t - self.mark[0] >= self.WINDOW:
            self.rate, self.mark = (c - self.mark[1]) / (t - self.mark[0]), (t, c)

    def first(self, harness, wanted, group):
        """The limit a pool starts with."""
        self.pools += 1
        start_cpu, rss_mb = harness.cost
        n = min(self.cpu / self.pools * self.WINDOW / max(start_cpu, 1e-3), self.memory / self.pools / (rss_mb << 20))
        return max(group, min(wanted, int(n)))

    def limit(self, harness, now, running, wanted, group):
        """A pool's next limit, from its limit `now` and the most sessions it ran over the window."""
        self.measure()
        n = now if not self.rate else max(running, 1) * self.cpu / self.rate
        n = min(n, self.memory / self.pools / (harness.cost[1] << 20), 2 * now)
        return max(group, min(wanted, int(n)))


def others_cpu() -> float:
    """CPU seconds the whole machine has been busy, less this process's own (its server and trainer threads): what
    rollouts' processes (and anything else running) took. RUSAGE_CHILDREN would miss them: bubblewrap's PID namespace
    does not pass its descendants' times up."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        busy = (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        u = resource.getrusage(resource.RUSAGE_CHILDREN)
        return u.ru_utime + u.ru_stime
    u = resource.getrusage(resource.RUSAGE_SELF)
    return busy - u.ru_utime - u.ru_stime


class RolloutPool:
    """Keeps up to `max_sessions` rollouts of one harness running, fewer while `fit` (a Fit) says the machine cannot
    run more: `limit`, `cpu_bound`. next_task() -> the next task, or None at the end; current_version() -> the
    adapter version new requests use (each rollout's start_version); reward(r) -> its r.reward, once. Finished groups arrive
    complete on `self.groups` (an asyncio.Queue), in order of completion; no new group begins while `backlog` + 1
    (max_sessions / group size: one step's worth) are begun and not taken."""

    def __init__(self, harness, proxy: Proxy, next_task, current_version, root, *, max_sessions, group_size, max_tokens,
                 context, rollouts_dir=None, keep=False, sandbox="auto", timeout=None, reward=None, name=None,
                 fit=None):
        self.harness, self.proxy, self.next_task, self.current_version = harness, proxy, next_task, current_version
        self.name = name or harness.name
        self.last_graded, self.ungraded_since = time.time(), []     # for the stall check (next_group)
        self.reward = reward
        self.root, self.max_sessions, self.group_size = Path(root), max_sessions, group_size
        self.rollouts_dir, self.keep, self.sandbox = rollouts_dir, keep, sandbox
        self.kw = {"max_tokens": max_tokens, "context": context, "timeout": timeout}
        self.groups = asyncio.Queue()
        self.backlog = max(1, max_sessions // group_size)
        self.fit = fit
        self.limit = fit.first(harness, max_sessions, group_size) if fit else max_sessions
        self.freed = asyncio.Condition()
        self.running, self.in_flight, self._tasks, self._scheduler = 0, 0, set(), None
        self.done = 0            # rollouts finished, graded or not (eval's progress line)

    @property
    def cpu_bound(self):
        return self.limit < self.max_sessions

    def start(self):
        self._scheduler = asyncio.create_task(self._schedule())

    async def _schedule(self):
        peak, since = 0, time.monotonic()
        while True:
            # at most one group beyond those running, and no more groups begun and not yet taken than one step of
            # max_sessions takes, plus one: a trainer in a long step must not come back to a backlog gone stale
            while (self.in_flight >= -(-self.limit // self.group_size) + 1
                   or self.in_flight + self.groups.qsize() > self.backlog):
                await asyncio.sleep(0.05)
                peak = max(peak, self.running)
                if self.fit and time.monotonic() - since >= Fit.WINDOW:
                    self.limit = self.fit.limit(self.harness, self.limit, peak, self.max_sessions, self.group_size)
                    async with self.freed:
                        self.freed.notify_all()
                    peak, since = self.running, time.monotonic()
            task = self.next_task()
            if task is None:
                return
            self.in_flight += 1
            gid = uuid.uuid4().hex[:8]
            rollouts = [Rollout(task, self.harness.name, gid, i) for i in range(self.group_size)]
            t = asyncio.create_task(self._group(task, rollouts))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    async def _group(self, task, rollouts):
        try:
            await asyncio.gather(*(self._one(r) for r in rollouts))
            await self.groups.put(Group(task, rollouts))
        finally:
            self.in_flight -= 1

    async def _one(self, r):
        async with self.freed:
            await self.freed.wait_for(lambda: self.running < self.limit)
            self.running += 1
        try:
            r.start_version = self.current_version()
            await run_rollout(r, self.harness, self.proxy, self.root, keep=self.keep, sandbox=self.sandbox, **self.kw)
        finally:
            async with self.freed:
                self.running, self.done = self.running - 1, self.done + 1
                self.freed.notify_all()
        if self.reward is not None:
            r.reward = self.reward(r)
        if self.rollouts_dir:           # a write that fails (a full disk) is said, not fatal: the group still arrives
            out = Path(self.rollouts_dir) / f"{r.start_version:05d}" / f"{r.id}.json"     # the version it began on
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(to_atif(r, self.harness.release), indent=1))
            except OSError as e:
                print(f"rollout {r.id}: could not write {out}: {e}", file=sys.stderr, flush=True)

    async def next_group(self, stop, stall_timeout):
        """The next finished group, or None once `stop` is set. Raises StallError, saying why, when no graded
        group arrived for stall_timeout seconds (a run that cannot progress must not spin forever)."""
        get = asyncio.ensure_future(self.groups.get())
        halt = asyncio.ensure_future(stop.wait())
        left = stall_timeout - (time.time() - self.last_graded)
        waits = {get, halt} | ({self._scheduler} if self._scheduler and not self._scheduler.done() else set())
        while True:     # a scheduler that ended with its tasks is no reason to stop waiting; one that failed is
            done, _ = await asyncio.wait(waits, timeout=max(left, 0.1), return_when=asyncio.FIRST_COMPLETED)
            if not done or get in done or halt in done or self._failed():
                break
            waits.discard(self._scheduler)
            left = stall_timeout - (time.time() - self.last_graded)
        halt.cancel()
        if get not in done:
            get.cancel()
            if halt in done:
                return None
            if self._failed():
                raise self._failed()                     # no group would come again: say why
            raise StallError(self.stall_reason(stall_timeout))
        g = get.result()
        if any(r.reward is not None for r in g.rollouts):
            self.last_graded, self.ungraded_since = time.time(), []
        else:
            self.ungraded_since += g.rollouts
        return g

    def _failed(self):
        t = self._scheduler
        return t is not None and t.done() and not t.cancelled() and t.exception()

    def stall_reason(self, stall_timeout):
        rs, head = self.ungraded_since, f"{self.name}: no graded group in {stall_timeout:g} s (--stall-timeout)"
        if not rs:
            return f"{head}, and no group finished at all ({self.running} rollouts still running): a hung server " \
                   "or harness? See runs/<run>/rollouts and the server log; a slow setup needs a larger --stall-timeout"
        why = collections.Counter(r.failure or "other" for r in rs)
        zero = sum(not r.turns for r in rs)
        first = next((r.errors[0] for r in rs if r.errors), "")
        return (f"{head}: {len(rs)} rollouts since then, all ungraded ({', '.join(f'{k} {v}' for k, v in why.items())})"
                + (f", {zero} with no model turn at all (does the prompt fit --context {self.kw['context']}?)"
                   if zero else "") + (f"; first error: {first[:300]}" if first else ""))

    async def stop(self):
        """Cancel everything; every harness process group is killed by run_rollout's cleanup."""
        if self._scheduler:
            self._scheduler.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, *( [self._scheduler] if self._scheduler else []), return_exceptions=True)
