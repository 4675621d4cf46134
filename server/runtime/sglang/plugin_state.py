"""The plugin's state inside one SGLang scheduler process, and what each hook does with it.

One :class:`PluginState` per scheduler process (module singleton in ``plugin``). It reads
``control.json`` (mtime-cached, at most every 20 ms), decodes and caches each request's ticket,
ranks the waiting queue with :class:`~agentconsole.server.runtime.sglang.ordering.Orderer`,
plans preemptions, credits measured step time to tenants, applies tool-wait retention hints to
the radix tree and writes ``status.json``. SGLang objects (``Req``, ``ScheduleBatch``,
``Scheduler``) are duck-typed (``Any``): only the fields listed in ``symbols`` are read.

Clocks: tickets, control and status use the wall clock (``time.time()``); ticket times are
shifted by the adapter's ``clock_offset``.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from dataclasses import fields
from pathlib import Path
from typing import Any

from agentconsole.scheduler.fairness import FairnessConfig, FairnessGuard
from agentconsole.scheduler.preemption import PreemptionRule
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang import plugin_status, retention, symbols, wire
from agentconsole.server.runtime.sglang.control import (
    CONTROL_FILE,
    PLACEMENT_FILE,
    STATUS_FILE,
    STEPS_FILE,
    CachedJsonFile,
    ControlState,
    rank_file,
    write_json_atomic,
)
from agentconsole.server.runtime.sglang.ordering import (
    Candidate,
    Orderer,
    Ranked,
    RunningView,
    ServiceMeter,
    preemption_priorities,
    preemption_victims,
)
from agentconsole.server.runtime.sglang.plugin_telemetry import PluginTelemetry
from agentconsole.server.runtime.sglang.status import SchedulerStatus
from agentconsole.server.runtime.sglang.steps import StepRecorder

logger = logging.getLogger("agentconsole.sglang.plugin")
_MAX_CONTEXTS = 4096
_STATUS_INTERVAL_S = 0.1
_TOUCH_EVERY, _TOUCH_MAX = 32, 128  # SGLang's own cadence and bound for the same refresh


def _config(cls: type[Any], data: dict[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


class PluginState:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._control_file = CachedJsonFile(state_dir / CONTROL_FILE)
        self.control = ControlState()
        self.guard = FairnessGuard()
        self.orderer = Orderer(self.guard, self.control.policy)
        self.meter = ServiceMeter(self.guard)
        self.rule = PreemptionRule()
        self._wires: dict[str, wire.WireTicket | None] = {}
        self._first_seen: dict[str, float] = {}
        self._admitted: dict[str, float] = {}
        self._requeued: set[str] = set()  # preempted by the operator, then seen waiting
        self._resumed: set[str] = set()  # ... and then seen running again
        self._overrides: dict[str, CallTicket] = {}
        self._contexts: OrderedDict[str, retention.Context] = OrderedDict()
        self._retention_seq: dict[str, int] = {}
        self._retained: dict[str, tuple[int, float]] = {}  # program -> (tokens, until)
        self.steps = StepRecorder(state_dir / STEPS_FILE)
        self.telemetry = PluginTelemetry(state_dir)  # evictions, busy time, placement
        self._status_path = state_dir / STATUS_FILE
        self._rank_bound = False
        self.dp_rank: int | None = None  # this scheduler's data-parallel rank (None: no DP)
        self._status_at = 0.0
        self._passes = 0
        self._status_dirty = True
        self.preemptions = 0
        self.errors = 0
        self.last_error = ""

    # -- control ----------------------------------------------------------------------------------
    def refresh(self, wall: float, *, force: bool = False) -> bool:
        """Re-read ``control.json`` if it changed; returns True when it did. Without ``force``
        the file is looked at most every 20 ms (the loop-pass hook); the ordering pass forces
        a look, so a change is always in force before the scheduler orders its queue."""
        data, changed = self._control_file.poll(time.monotonic(), force=force)
        if not changed or data is None:
            return False
        control = ControlState.from_json(data)
        self.control = control
        self.orderer.set_policy(control.policy)
        self.guard.config = _config(FairnessConfig, control.fairness)
        self.rule = _config(PreemptionRule, control.preemption)
        self._overrides = {
            rid: CallTicket.from_params(params) for rid, params in control.tickets.items()
        }
        self._status_dirty = True
        return True

    @property
    def paused(self) -> bool:
        return self.control.paused

    def record_error(self, where: str, err: BaseException) -> None:
        """Count an error in a hook; the first few are logged with their traceback."""
        self.errors += 1
        self.last_error = f"{where}: {type(err).__name__}: {err}"
        if self.errors <= 5:
            logger.exception("agentconsole plugin error in %s", where)

    # -- requests ---------------------------------------------------------------------------------
    def wire_of(self, req: Any) -> wire.WireTicket | None:
        rid = req.rid
        if rid not in self._wires:
            params = getattr(req.sampling_params, "custom_params", None)
            self._wires[rid] = wire.decode(params)
        return self._wires[rid]

    def candidate(self, req: Any, wall: float) -> Candidate:
        rid = req.rid
        first = self._first_seen.setdefault(rid, wall)
        preempted = self.control.preempted.get(rid)
        if preempted is not None and rid in self._resumed:
            preempted = None
        return Candidate(rid, self.wire_of(req), first, preempted)

    def rank(self, reqs: list[Any], wall: float) -> list[Ranked]:
        cands = [self.candidate(r, wall) for r in reqs]
        return self.orderer.rank(cands, wall, boosts=self.control.boosts, tickets=self._overrides)

    def sort_waiting(self, waiting: list[Any], wall: float, tree: Any = None) -> None:
        """Sort SGLang's waiting queue in place, best effective key first (after applying a
        control change, so retention marks are in place before this pass allocates KV)."""
        if self.refresh(wall, force=True):
            self.apply_retention(tree, wall)
        ranked = self.rank(waiting, wall)
        for req, r in zip(waiting, ranked, strict=True):
            if r.candidate.preempted_at is not None and wall > r.candidate.preempted_at:
                self._requeued.add(req.rid)
        order = sorted(range(len(waiting)), key=lambda i: ranked[i].key)
        waiting[:] = [waiting[i] for i in order]
        self._touch_waiting(waiting, tree)

    def _touch_waiting(self, waiting: list[Any], tree: Any) -> None:
        """Refresh the recency of waiting requests' cached prefixes, head of the queue last
        (so LRU evicts them in reverse run order), every few passes: what stock SGLang does
        for its ``lru`` policy (``SchedulePolicy._touch_waiting_prefixes``), which a custom
        eviction strategy does not get. Without it a request's prefix can be evicted while it
        waits, and it pays the prefill again."""
        self._passes += 1
        if tree is None or not waiting or self._passes % _TOUCH_EVERY:
            return
        touch = symbols.load(symbols.TOUCH_WAITING)
        for req in reversed(waiting[:_TOUCH_MAX]):
            touch(req, tree)

    def plan_preemption(
        self, req: Any, running: list[Any], threshold: int
    ) -> tuple[int, dict[str, int]] | None:
        """Temporary priorities for SGLang's ``preempt_to_schedule(req)``, or None when no
        running request may be displaced (see ``ordering.preemption_victims``)."""
        if self.paused:
            return None
        wall = time.time()
        live = [r for r in running if not r.finished()]
        ranked = self.rank([req, *live], wall)
        views = []
        for r, rk in zip(live, ranked[1:], strict=True):
            w = self.wire_of(r)
            generated = len(r.output_ids)
            views.append(
                RunningView(
                    r.rid,
                    rk.key,
                    wall - self._admitted.get(r.rid, wall),
                    self.meter.remaining_s(w.ticket if w else None, generated),
                    self.meter.restore_s(len(r.origin_input_ids) + generated),
                    protected=w is None or w.kind is wire.CallKind.PROBE,
                )
            )
        preemptive = self.orderer.policy.preemptive
        victims = preemption_victims(ranked[0].key, views, self.rule, preemptive=preemptive)
        if not victims:
            return None
        others = [v.rid for v in views if v.rid not in victims]
        return preemption_priorities(victims, others, threshold)

    # -- steps ------------------------------------------------------------------------------------
    def on_step(self, batch: Any, start: float, seconds: float, *, forward: bool) -> None:
        """Credit one measured step phase (a forward, or its result processing) to its
        requests; with ``record_steps`` on, record it for calibration."""
        wall = time.time()
        if forward:
            self.telemetry.on_forward(seconds)
        reqs = list(getattr(batch, "reqs", None) or [])
        try:
            prefill = bool(batch.forward_mode.is_extend())
        except AttributeError:
            prefill = False
        extend = list(getattr(batch, "extend_lens", None) or []) if prefill else []
        if len(extend) != len(reqs):
            extend = [1] * len(reqs)
        shares = []
        for req, tokens in zip(reqs, extend, strict=True):
            w = self.wire_of(req)
            shares.append((w.ticket.tenant if w else "", int(tokens)))
            self._note_running(req, w, wall)
        self.meter.credit(shares, seconds, wall, prefill=prefill)
        if not self.control.record_steps:
            return
        if forward:
            self.steps.forward(batch, reqs, extend if prefill else [], start, seconds)
        else:
            self.steps.result(batch, seconds)

    def on_scheduled(self, plan: Any, seconds: float) -> None:
        """The scheduler spent ``seconds`` forming ``plan`` (its next batch, if any)."""
        if self.control.record_steps:
            self.steps.scheduled(getattr(plan, "batch_to_run", None), seconds)

    def _note_running(self, req: Any, w: wire.WireTicket | None, wall: float) -> None:
        rid = req.rid
        if rid not in self._admitted:
            self._admitted[rid] = wall
        if rid in self._requeued:
            self._requeued.discard(rid)
            self._resumed.add(rid)
        if w is not None and w.kind is wire.CallKind.CALL:
            ctx = retention.Context(
                req.origin_input_ids,
                req.output_ids,
                getattr(req, "extra_key", None),
                getattr(req, "cache_salt", None),
            )
            program = w.ticket.program_id
            self._contexts[program] = ctx
            self._contexts.move_to_end(program)
            while len(self._contexts) > _MAX_CONTEXTS:
                self._contexts.popitem(last=False)

    def on_preempted(self, count: int) -> None:
        self.preemptions += count
        self._status_dirty = True

    # -- data-parallel rank -------------------------------------------------------------------
    def bind_rank(self) -> None:
        """Name this scheduler's files after its data-parallel rank (``control.rank_file``).
        Not at construction: SGLang loads plugins before it publishes the process's ranks, so
        the rank is read once the scheduler exists (its policy's constructor, or the first
        loop pass)."""
        if self._rank_bound:
            return
        self._rank_bound = True
        rank = self.dp_rank = plugin_status.data_parallel_rank()
        if rank is None:
            return
        self._status_path = self.state_dir / rank_file(STATUS_FILE, rank)
        self.steps.path = self.state_dir / rank_file(STEPS_FILE, rank)
        if self.telemetry.placement is not None:
            self.telemetry.placement.path = self.state_dir / rank_file(PLACEMENT_FILE, rank)

    # -- once per scheduler loop pass -------------------------------------------------------------
    def on_loop(self, scheduler: Any) -> None:
        """Poll control, apply new retention hints, publish status when due."""
        self.bind_rank()
        wall = time.time()
        if self.refresh(wall):
            self.apply_retention(getattr(scheduler, "tree_cache", None), wall)
        if self._status_dirty or wall - self._status_at >= _STATUS_INTERVAL_S:
            self.publish(scheduler, wall)
        self.telemetry.on_loop(scheduler, self._contexts)

    def apply_retention(self, tree: Any, wall: float) -> None:
        """Mark the radix tree for every retention hint not applied yet."""
        for program in [p for p in self._retention_seq if p not in self.control.retention]:
            del self._retention_seq[program]  # the adapter dropped the hint: forget it too
            self._retained.pop(program, None)
        for program, hint in self.control.retention.items():
            if self._retention_seq.get(program) == hint.seq:
                continue
            self._retention_seq[program] = hint.seq
            ctx = self._contexts.get(program)
            if ctx is None or tree is None:
                continue
            until = retention.mark_for(hint.action, hint.until)
            whole = hint.action not in ("recompute", "drop", "offload")
            tokens = retention.mark_context(tree, ctx, until, whole_path=whole)
            if hint.action == "keep":
                self._retained[program] = (tokens, hint.until)
            else:
                self._retained.pop(program, None)

    def publish(self, scheduler: Any, wall: float) -> None:
        """Write ``status.json`` from the scheduler's live state; prunes per-request caches."""
        waiting = list(getattr(scheduler, "waiting_queue", []) or [])
        running_batch = getattr(scheduler, "running_batch", None)
        running = [r for r in (getattr(running_batch, "reqs", None) or []) if not r.finished()]
        ranked = sorted(self.rank(waiting, wall), key=lambda r: r.key) if waiting else []
        status = SchedulerStatus(
            pid=os.getpid(),
            written_at=wall,
            control_version=self.control.version,
            policy=self.orderer.policy_name,
            paused=self.paused,
            queued=plugin_status.queued_entries(ranked, wall, waiting),
            running=plugin_status.running_entries(running, self.wire_of, self._admitted, wall),
            retained_tokens={p: n for p, (n, until) in self._retained.items() if until > wall},
            tenant_service_s=dict(self.meter.service_s),
            preemptions=self.preemptions,
            errors=self.errors,
            last_error=self.last_error,
        )
        plugin_status.fill_kv(status, scheduler)
        self.telemetry.fill(status, scheduler)
        write_json_atomic(self._status_path, status.to_json())
        self._status_at = wall
        self._status_dirty = False
        self._prune(plugin_status.live_rids(scheduler, waiting, running))

    def _prune(self, live: set[str]) -> None:
        for table in (self._wires, self._first_seen, self._admitted):
            for rid in [rid for rid in table if rid not in live]:
                del table[rid]
        self._requeued &= live
        self._resumed &= live | set(self.control.preempted)

    def write_marker(self, policy: Any) -> None:
        """Record that SGLang built our policy in this process (the adapter checks it)."""
        self.bind_rank()
        plugin_status.write_marker(self.state_dir, policy, self.dp_rank)
