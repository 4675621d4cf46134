"""Telemetry the plugin gathers inside SGLang's scheduler process: evictions, busy time, where
each tracked program's last context is (placement) and HiCache's host tier.

* **Evictions**: an AROUND hook on ``BasePrefixCache.update_eviction_metrics`` (``plugin``),
  which SGLang 0.5.23 calls once per eviction pass with the device tokens that pass freed, in
  both tree caches and whether or not ``--enable-metrics`` is on. Why there: it is the one
  place every pass goes through with its exact count (``evict`` and ``evict_for_alloc`` are
  two entry points, and the second can run several passes), and observing it changes nothing
  SGLang does. The eviction strategy's ``get_priority`` would not do (it is asked about
  candidates, not victims), nor would deltas of ``evictable_size()`` (inserts and lock changes
  move it too). With HiCache a pass also counts demotions (device slots freed, host copy kept).
* **Placement**: for each program the plugin tracks (``PluginState._contexts``), the tokens of
  its last context still resident on the device, and how many of those are its own exclusive
  suffix (as ``retention.mark_context(whole_path=False)`` defines it). It uses the tree core's
  read-only device match (``match_full_device_prefix``): ``match_prefix`` would split nodes and
  refresh the recency of every tracked context, which would defeat LRU. A sweep runs at most
  once a second, only after the tree may have changed (a forward pass or an eviction), and in
  slices of at most 1 ms per scheduler loop pass, so a busy scheduler pays little.

SGLang objects are duck-typed; every entry point is called from a guarded hook.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentconsole.server.runtime.sglang import retention, wire
from agentconsole.server.runtime.sglang.control import PLACEMENT_FILE, write_json_atomic
from agentconsole.server.runtime.sglang.status import Placement, SchedulerStatus

_EVICTIONS_KEPT = 64  # passes listed in status.json (the adapter reads it every 100 ms)
_SWEEP_INTERVAL_S = 1.0
_SWEEP_SLICE_S = 0.001
_SWEEP_MAX_PROGRAMS = 512  # the most recently active programs
#: waiting requests matched per live match (``lpm`` matches at most 128: above, it is FCFS)
_LIVE_MATCH_MAX = 128
#: prompt tokens matched per live match: the match is linear in the prompt, so a queue of long
#: prompts stays bounded (a count, not a clock: every tensor rank must match the same ones)
_LIVE_MATCH_TOKENS = 262_144


def report_queue_time(req: Any) -> None:
    """Report the seconds ``req`` waited in SGLang's queue so far (SGLang sums every spell,
    whether or not its metrics are on) in its ``meta_info``, under ``wire.QUEUE_TIME_KEY``:
    call at its first forward after a spell in the queue (its first, or after a retraction),
    before that forward's output. SGLang passes ``customized_info`` values token by token
    from the first one not sent yet, so the value sits at the next token's place (the ones
    before: None) and the tokenizer appends it to what the request had."""
    queued = getattr(getattr(req, "time_stats", None), "queue_duration_s", None)
    if not isinstance(queued, int | float):
        return
    info = getattr(req, "customized_info", None)
    if info is None:
        info = req.customized_info = {}
    info[wire.QUEUE_TIME_KEY] = [None] * len(getattr(req, "output_ids", None) or ()) + [
        float(queued)
    ]


class EvictionLog:
    """Device tokens evicted since start, and the latest passes (for ``status.json``)."""

    def __init__(self, keep: int = _EVICTIONS_KEPT) -> None:
        self.total = 0
        self.seq = 0
        self.recent: deque[tuple[int, float, int]] = deque(maxlen=keep)

    def record(self, tokens: int, wall: float) -> None:
        """Count one eviction pass that freed ``tokens`` device tokens at ``wall``."""
        if tokens <= 0:
            return
        self.seq += 1
        self.total += tokens
        self.recent.append((self.seq, wall, tokens))


def waiting_residency(
    tree_cache: Any, reqs: list[Any], *, max_tokens: int = _LIVE_MATCH_TOKENS
) -> dict[str, int]:
    """Request id -> tokens of its prompt resident on the device now, for the head of
    ``reqs`` (waiting requests, in queue order): at most ``_LIVE_MATCH_MAX`` of them and
    ``max_tokens`` of prompt in all (the first one always). The rest are left out (their
    tickets stand as queued). Read-only, as placement is; empty when the tree core has no
    such match."""
    core = getattr(tree_cache, "tree_core", None)
    match = getattr(core, "match_full_device_prefix", None)
    if match is None:
        return {}
    out: dict[str, int] = {}
    budget = max_tokens
    for req in reqs[:_LIVE_MATCH_MAX]:
        ctx = retention.Context(req.origin_input_ids, req.output_ids, req.extra_key, req.cache_salt)
        ids = ctx.token_ids()
        if out and len(ids) > budget:
            break
        budget -= len(ids)
        out[req.rid] = max(0, int(match(retention.radix_key_of(ids, ctx))[0]))
    return out


def context_residency(tree_cache: Any, ctx: retention.Context) -> tuple[int, int]:
    """(resident, private): tokens of ``ctx`` resident on the device, and how many of them
    form its exclusive suffix (below the deepest node another sequence continues from).
    Changes nothing in the tree."""
    core = tree_cache.tree_core
    matched, node_id, pinned = core.match_full_device_prefix(retention.radix_key(ctx))
    if matched <= 0:
        return 0, 0
    if pinned > matched:  # the context ends inside a node: a longer sequence holds it all
        return int(matched), 0
    try:
        node = tree_cache.resolve_node_handle(node_id)
        private, first = 0, True
        while node is not None and node.parent is not None:
            if len(node.children) > (0 if first else 1):
                break
            private += len(node.key) if node.key is not None else 0
            node, first = node.parent, False
    except AttributeError:  # a tree core without Python nodes: no split known
        private = 0
    return int(matched), min(private, int(matched))


class PlacementSweep:
    """Computes :class:`Placement` in slices and writes ``placement.json`` after each sweep."""

    def __init__(
        self,
        path: Path,
        *,
        interval_s: float = _SWEEP_INTERVAL_S,
        slice_s: float = _SWEEP_SLICE_S,
        max_programs: int = _SWEEP_MAX_PROGRAMS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.path = path
        self.interval_s = interval_s
        self.slice_s = slice_s
        self.max_programs = max_programs
        self.clock = clock
        #: bumped whenever the tree may have changed; a sweep starts only after a change
        self.changes = 0
        self._swept_changes = -1
        self._next_at = 0.0
        self._todo: list[str] = []
        self._found: dict[str, tuple[int, int]] = {}
        self._began = 0.0  # when the sweep in progress took its programs

    def step(self, tree: Any, contexts: Mapping[str, retention.Context], wall: float) -> bool:
        """Advance the sweep by one slice (starting one when due); True when a sweep
        completed and ``placement.json`` was written."""
        if tree is None:
            return False
        if not self._todo:
            if wall < self._next_at or self.changes == self._swept_changes:
                return False
            self._swept_changes = self.changes
            self._todo = list(contexts)[-self.max_programs :]  # oldest first: pop() newest
            self._found = {}
            # what it says is as of when it took the programs: a call that ran while it swept
            # is newer than it (stamped at its end, the sweep would read as newer than the
            # call, and say the rank held nothing of a program it never looked at)
            self._began = wall
        deadline = self.clock() + self.slice_s
        while self._todo:
            program = self._todo.pop()
            ctx = contexts.get(program)
            if ctx is not None:
                resident, private = context_residency(tree, ctx)
                if resident > 0:
                    self._found[program] = (resident, private)
            if self.clock() >= deadline:
                break
        if self._todo:
            return False
        write_json_atomic(self.path, Placement(self._began, self._found).to_json())
        self._next_at = wall + self.interval_s
        return True


def host_usage(tree_cache: Any) -> tuple[int, int]:
    """(used, capacity) tokens of HiCache's host pool; (0, 0) without HiCache. Best effort
    (untested here: HiCache needs a GPU), read the way SGLang's own metrics reporter does."""
    pool = getattr(tree_cache, "token_to_kv_pool_host", None) or getattr(
        tree_cache, "full_kv_pool_host", None
    )
    if pool is None:
        return 0, 0
    try:
        capacity = int(getattr(pool, "logical_size", None) or pool.size)
        return max(capacity - int(pool.available_size()), 0), capacity
    except (AttributeError, TypeError, ValueError):
        return 0, 0


class PluginTelemetry:
    """The plugin's telemetry state: what ``PluginState`` feeds and publishes."""

    def __init__(self, state_dir: Path) -> None:
        self.evictions = EvictionLog()
        self.placement: PlacementSweep | None = PlacementSweep(state_dir / PLACEMENT_FILE)
        self.busy_s = 0.0
        self._sweep_failures = 0

    def on_evicted(self, tokens: int, wall: float) -> None:
        """An eviction pass freed ``tokens`` device tokens."""
        self.evictions.record(tokens, wall)
        if self.placement is not None:
            self.placement.changes += 1

    def on_forward(self, seconds: float) -> None:
        """A forward pass took ``seconds`` (the engine's busy time; it may change the tree)."""
        self.busy_s += seconds
        if self.placement is not None:
            self.placement.changes += 1

    def on_loop(self, scheduler: Any, contexts: Mapping[str, retention.Context]) -> None:
        """Once per scheduler loop pass: advance the placement sweep. Raises what the sweep
        raised (the caller records it); after three failures in a row the sweep is turned
        off, so a tree it cannot read costs the scheduler nothing more."""
        if self.placement is None:
            return
        try:
            self.placement.step(getattr(scheduler, "tree_cache", None), contexts, time.time())
            self._sweep_failures = 0
        except Exception:
            self._sweep_failures += 1
            if self._sweep_failures >= 3:
                self.placement = None
            raise

    def fill(self, status: SchedulerStatus, scheduler: Any) -> None:
        """Write the telemetry fields of ``status``."""
        status.busy_s = self.busy_s
        status.evicted_tokens = self.evictions.total
        status.evictions = [[s, t, n] for s, t, n in self.evictions.recent]
        used, capacity = host_usage(getattr(scheduler, "tree_cache", None))
        status.host_used_tokens, status.host_capacity_tokens = used, capacity
