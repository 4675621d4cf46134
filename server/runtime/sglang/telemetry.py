"""The SGLang runtime's engine events, in the simulator's vocabulary, into the server's sink.

``serve`` hands every runtime its ``EventHub`` as ``options.extra["event_sink"]``; the
``MetricsAggregator``, Prometheus and the consoles then compute the same metrics for SGLang
as for the simulator (``call.scheduled``, ``kv.*``, ``engine.stats``; data keys as in
``scheduler.metrics``). Per-call events carry the call's program, node, attempt and tenant.

Per call, from the call's own stream (nothing to lose, and the numbers are the call's):

* ``call.scheduled`` once, at the first chunk (SGLang streams once the prefill is done):
  ``hit_tokens`` is SGLang's ``cached_tokens`` (device plus host: exactly what the API returns
  as cached tokens), ``reload_tokens`` its host part (HiCache), ``recompute_tokens`` the
  tokens of the program's earlier context it prefilled again (``contexts``);
* ``kv.recomputed`` when it recomputed any, ``kv.reloaded`` when HiCache loaded any back;
* the restore time, where knowable: with SGLang's metrics on, ``meta_info`` has the call's
  prefill span; its recomputed share of the tokens it prefilled is the call's ``restore_s``
  (what critical-path KV idle adds up). An estimate: a prefill batched with other calls is
  shared time.

From the plugin's ``status.json`` (polled every 100 ms): ``kv.evicted`` per eviction pass
(SGLang evicts to make room for an allocation, not for a program: no program id), and
``engine.stats`` every 5 s (busy seconds, KV bytes on the device and, with HiCache, the host).
With data-parallel ranks each rank's status is read on its own (eviction passes are numbered
per rank) and each rank reports as an engine of its own, ``sglang.rank<r>`` (the aggregator
sums engines); ``call.scheduled`` then carries the call's ``dp_rank``. A rank whose scheduler
process was replaced (a restarted router worker: another pid, or counters that went back) is
counted afresh: every pass the new process reports is new, and its busy seconds add to the old
process's.
Every entry point is guarded: telemetry never fails a call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentconsole.scheduler.events import Event, EventKind, EventSink, Scalar
from agentconsole.server.live.periodic import Periodic
from agentconsole.server.runtime.sglang import wire
from agentconsole.server.runtime.sglang.contexts import ProgramContexts
from agentconsole.server.runtime.sglang.status import SchedulerStatus
from agentconsole.server.runtime.sglang.stream import SGLangStream, reported_queue_s

logger = logging.getLogger("agentconsole.sglang")
ENGINE = "sglang"
_POLL_S = 0.1
_STATS_S = 5.0
_PROBE_PROGRAM = "__probe__"


def salt_of(call: SGLangStream) -> str:
    """The ``cache_salt`` the adapter sends with the call."""
    return wire.request_salt(call.request)


def prefill_seconds(meta: Mapping[str, Any]) -> float | None:
    """The call's prefill span from SGLang's ``meta_info`` (None without SGLang's metrics)."""
    start, end = meta.get("forward_entry_time"), meta.get("prefill_finished_time")
    if isinstance(start, int | float) and isinstance(end, int | float) and end >= start > 0:
        return float(end - start)
    return None


@dataclass(slots=True)
class _RankSeen:
    """What was already emitted of one rank's status. The plugin's counters (eviction pass
    numbers, evicted tokens, busy seconds) count from 0 in each scheduler process; a rank
    whose process was replaced (a restarted router worker) is counted afresh."""

    status_at: float = -1.0
    pid: int = 0  # the scheduler process that wrote the last status (0: not reported)
    eviction_seq: int = 0
    evicted: int = 0  # tokens emitted as kv.evicted
    busy_s: float = 0.0  # the current process's busy seconds, as last reported
    busy_before: float = 0.0  # busy seconds of the rank's earlier processes

    def restarted(self, status: SchedulerStatus) -> bool:
        """Whether ``status`` comes from another process than the earlier ones: another pid,
        or a counter below what was seen (each only grows within one process)."""
        newest = max((int(e[0]) for e in status.evictions), default=self.eviction_seq)
        return (
            bool(self.pid and status.pid and status.pid != self.pid)
            or newest < self.eviction_seq
            or status.evicted_tokens < self.evicted
            or status.busy_s < self.busy_s
        )

    def restart(self) -> None:
        """Count from the new process's figures: its passes and totals start from 0 (so
        every pass it reports is new); the busy seconds already reported are kept, so the
        rank's busy time never goes back."""
        self.busy_before += self.busy_s
        self.busy_s = 0.0
        self.eviction_seq = self.evicted = 0


class Telemetry:
    """See the module docstring. ``sink`` None: nothing is emitted (contexts are still kept,
    for ``probe``). ``read_ranks``: each data-parallel rank's status (default: the one
    ``read_status`` gives)."""

    def __init__(
        self,
        sink: EventSink | None,
        read_status: Callable[[], SchedulerStatus | None],
        contexts: ProgramContexts,
        *,
        read_ranks: Callable[[], Sequence[SchedulerStatus | None]] | None = None,
        poll_s: float = _POLL_S,
        stats_s: float = _STATS_S,
    ) -> None:
        self.sink = sink
        self.read_status = read_status
        self.read_ranks = read_ranks or (lambda: [read_status()])
        self.contexts = contexts
        self.poll_s = poll_s
        self.stats_s = stats_s
        self._poller: Periodic | None = None
        self._seen: dict[int, _RankSeen] = {}
        self._stats_at = 0.0
        self._errors = 0

    # -- per call ----------------------------------------------------------------------------
    def on_chunk(self, call: SGLangStream, chunk: Mapping[str, Any]) -> None:
        """A streamed chunk of ``call``: keep its token ids; on the first one after the
        prefill, emit the call's ``call.scheduled`` (and ``kv.*``) events."""
        try:
            self._on_chunk(call, chunk)
        except Exception:
            self._error("chunk")

    def _on_chunk(self, call: SGLangStream, chunk: Mapping[str, Any]) -> None:
        ids = chunk.get("prompt_token_ids")
        if ids is not None:
            call.prompt_ids = ids
        out = chunk.get("output_ids")
        if out is not None:
            call.output_ids = out
        meta = chunk.get("meta_info") or {}
        if call.scheduled or int(meta.get("completion_tokens") or 0) < 1:
            return
        call.scheduled = True
        t = call.request.ticket
        if t.program_id == _PROBE_PROGRAM:
            return
        hit = int(meta.get("cached_tokens") or 0)
        rank: dict[str, Scalar] = {} if call.rank is None else {"dp_rank": call.rank}
        details = meta.get("cached_tokens_details")
        host = int(details.get("host") or 0) if isinstance(details, Mapping) else 0
        prompt = call.prompt_ids if call.prompt_ids is not None else call.request.prompt_ids
        recompute = (
            self.contexts.recomputed(t.program_id, salt_of(call), prompt, hit) if prompt else 0
        )
        prompt_tokens = int(meta.get("prompt_tokens") or (len(prompt) if prompt else 0))
        prefill_s = prefill_seconds(meta)
        if recompute and prefill_s is not None:
            call.restore_s = prefill_s * recompute / max(prompt_tokens - hit, 1)
        self._emit_call(
            call,
            EventKind.CALL_SCHEDULED,
            {
                "queue_s": reported_queue_s(meta) or 0.0,
                "hit_tokens": hit,
                "reload_tokens": host,
                "recompute_tokens": recompute,
                "restore_s": call.restore_s,
                **rank,
            },
        )
        if recompute:
            self._emit_call(call, EventKind.KV_RECOMPUTED, {"tokens": recompute})
        if host:
            self._emit_call(call, EventKind.KV_RELOADED, {"tokens": host})

    def on_end(self, call: SGLangStream) -> None:
        """``call`` ended: a finished call's context becomes its program's last context."""
        try:
            reason = call.meta.get("finish_reason")
            kind = reason.get("type") if isinstance(reason, Mapping) else None
            prompt = call.prompt_ids if call.prompt_ids is not None else call.request.prompt_ids
            t = call.request.ticket
            if call.aborting or kind not in ("stop", "length") or not prompt:
                return
            if t.program_id == _PROBE_PROGRAM:
                return
            self.contexts.remember(t.program_id, salt_of(call), prompt, call.output_ids or ())
        except Exception:
            self._error("end")

    def _emit_call(self, call: SGLangStream, kind: EventKind, data: dict[str, Scalar]) -> None:
        if self.sink is None:
            return
        t = call.request.ticket
        self.sink.emit(Event(time.time(), kind, t.program_id, t.node_id, t.attempt, t.tenant, data))

    # -- from the plugin's status ------------------------------------------------------------
    def poll(self, now: float) -> None:
        """Emit the eviction passes and (when due) the engine stats the plugin reported since
        the last poll, for every rank."""
        if self.sink is None:
            return
        statuses = self.read_ranks()
        stats_due = now - self._stats_at >= self.stats_s
        emitted = False
        for r, status in enumerate(statuses):
            rank = None if len(statuses) == 1 else r
            emitted |= self._poll_rank(rank, status, now, stats_due=stats_due)
        if emitted:
            self._stats_at = now

    def _poll_rank(
        self, rank: int | None, status: SchedulerStatus | None, now: float, *, stats_due: bool
    ) -> bool:
        """One rank's share of :meth:`poll` (``rank`` None: the engine has one); True when it
        emitted the rank's stats."""
        seen = self._seen.setdefault(rank or 0, _RankSeen())
        if status is None or self.sink is None or status.written_at == seen.status_at:
            return False
        seen.status_at = status.written_at
        if seen.restarted(status):
            seen.restart()
        seen.pid, seen.busy_s = status.pid, status.busy_s
        self._evictions(seen, status, now, rank)
        if stats_due:
            per_token = status.kv_bytes_per_token
            data: dict[str, Scalar] = {
                "engine": ENGINE if rank is None else f"{ENGINE}.rank{rank}",
                "busy_s": seen.busy_before + status.busy_s,
                "hbm_bytes": status.kv_used_tokens * per_token,
                "dram_bytes": status.host_used_tokens * per_token,
                "running": len(status.running),
                "queued": len(status.queued),
            }
            self.sink.emit(Event(now, EventKind.ENGINE_STATS, data=data))
        return stats_due

    def _evictions(
        self, seen: _RankSeen, status: SchedulerStatus, now: float, rank: int | None
    ) -> None:
        """Emit the rank's eviction passes not emitted yet (those that left the status's list
        unseen as one event at ``now``); advances ``seen``."""
        for seq, at, tokens in status.evictions:
            if seq > seen.eviction_seq:
                seen.eviction_seq = int(seq)
                self._evict(seen, float(at), int(tokens), rank)
        missed = status.evicted_tokens - seen.evicted  # passes that left the list unseen
        if missed > 0:
            self._evict(seen, now, missed, rank)

    def _evict(self, seen: _RankSeen, at: float, tokens: int, rank: int | None) -> None:
        seen.evicted += tokens
        if self.sink is not None:
            data: dict[str, Scalar] = {"tokens": tokens}
            if rank is not None:
                data["dp_rank"] = rank
            self.sink.emit(Event(at, EventKind.KV_EVICTED, data=data))

    def start(self) -> None:
        """Start polling the plugin's status (on the running loop)."""
        if self._poller is None:
            self._poller = Periodic("sglang-telemetry", self.poll_s, self._tick)
            self._poller.start()

    async def stop(self) -> None:
        poller, self._poller = self._poller, None
        if poller is not None:
            await poller.stop()

    async def _tick(self) -> None:
        try:
            self.poll(time.time())
        except Exception:
            self._error("poll")

    def _error(self, where: str) -> None:
        self._errors += 1
        if self._errors <= 5:  # a bug here must not flood the log of a busy server
            logger.exception("SGLang telemetry error (%s)", where)
