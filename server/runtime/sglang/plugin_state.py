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

import json
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
from agentconsole.server.runtime.sglang import retention, wire
from agentconsole.server.runtime.sglang.control import (
    CONTROL_FILE,
    MARKER_PREFIX,
    STATUS_FILE,
    CachedJsonFile,
    ControlState,
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
from agentconsole.server.runtime.sglang.status import QueuedEntry, RunningEntry, SchedulerStatus

logger = logging.getLogger("agentconsole.sglang.plugin")
_MAX_CONTEXTS = 4096
_STATUS_INTERVAL_S = 0.1


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
        self._status_at = 0.0
        self._status_dirty = True
        self.preemptions = 0
        self.errors = 0
        self.last_error = ""

    # -- control ----------------------------------------------------------------------------------
    def refresh(self, wall: float) -> bool:
        """Re-read ``control.json`` if it changed; returns True when it did."""
        data, changed = self._control_file.poll(time.monotonic())
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
        if self.refresh(wall):
            self.apply_retention(tree, wall)
        ranked = self.rank(waiting, wall)
        for req, r in zip(waiting, ranked, strict=True):
            if r.candidate.preempted_at is not None and wall > r.candidate.preempted_at:
                self._requeued.add(req.rid)
        order = sorted(range(len(waiting)), key=lambda i: ranked[i].key)
        waiting[:] = [waiting[i] for i in order]

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
    def on_step(self, batch: Any, seconds: float) -> None:
        """Credit one measured step (a forward, or its result processing) to its requests."""
        wall = time.time()
        reqs = list(getattr(batch, "reqs", None) or [])
        try:
            prefill = bool(batch.forward_mode.is_extend())
        except AttributeError:
            prefill = False
        shares = []
        for req in reqs:
            w = self.wire_of(req)
            tokens = int(getattr(req, "extend_input_len", 1) or 1) if prefill else 1
            shares.append((w.ticket.tenant if w else "", tokens))
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
        self.meter.credit(shares, seconds, wall, prefill=prefill)

    def on_preempted(self, count: int) -> None:
        self.preemptions += count
        self._status_dirty = True

    # -- once per scheduler loop pass -------------------------------------------------------------
    def on_loop(self, scheduler: Any) -> None:
        """Poll control, apply new retention hints, publish status when due."""
        wall = time.time()
        if self.refresh(wall):
            self.apply_retention(getattr(scheduler, "tree_cache", None), wall)
        if self._status_dirty or wall - self._status_at >= _STATUS_INTERVAL_S:
            self.publish(scheduler, wall)

    def apply_retention(self, tree: Any, wall: float) -> None:
        """Mark the radix tree for every retention hint not applied yet."""
        for program, hint in self.control.retention.items():
            if self._retention_seq.get(program) == hint.seq:
                continue
            self._retention_seq[program] = hint.seq
            ctx = self._contexts.get(program)
            if ctx is None or tree is None:
                continue
            keep = hint.action == "keep"
            until = hint.until if keep else retention.DROPPED
            tokens = retention.mark_context(tree, ctx, until, whole_path=keep)
            if keep:
                self._retained[program] = (tokens, hint.until)
            else:
                self._retained.pop(program, None)

    def publish(self, scheduler: Any, wall: float) -> None:
        """Write ``status.json`` from the scheduler's live state; prunes per-request caches."""
        waiting = list(getattr(scheduler, "waiting_queue", []) or [])
        running_batch = getattr(scheduler, "running_batch", None)
        running = [r for r in (getattr(running_batch, "reqs", None) or []) if not r.finished()]
        ranked = sorted(self.rank(waiting, wall), key=lambda r: r.key) if waiting else []
        queued = [
            QueuedEntry(
                r.candidate.rid,
                r.program_id,
                r.tenant,
                r.key[0],
                r.policy_key if r.policy_key != float("inf") else 1e30,
                wall - r.candidate.first_seen,
            )
            for r in ranked
        ]
        run_entries = []
        for req in running:
            w = self.wire_of(req)
            t = w.ticket if w else None
            generated = len(req.output_ids)
            run_entries.append(
                RunningEntry(
                    req.rid,
                    t.program_id if t else "",
                    t.tenant if t else "",
                    len(req.origin_input_ids) + generated,
                    generated,
                    wall - self._admitted.get(req.rid, wall),
                )
            )
        status = SchedulerStatus(
            pid=os.getpid(),
            written_at=wall,
            control_version=self.control.version,
            policy=self.orderer.policy_name,
            paused=self.paused,
            queued=queued,
            running=run_entries,
            retained_tokens={p: n for p, (n, until) in self._retained.items() if until > wall},
            tenant_service_s=dict(self.meter.service_s),
            preemptions=self.preemptions,
            errors=self.errors,
            last_error=self.last_error,
        )
        _fill_kv(status, scheduler)
        write_json_atomic(self.state_dir / STATUS_FILE, status.to_json())
        self._status_at = wall
        self._status_dirty = False
        live = {r.rid for r in waiting} | {r.rid for r in running}
        # between steps a request may sit only in the batch just formed or as a chunked prefill
        last = getattr(scheduler, "last_batch", None)
        live |= {r.rid for r in (getattr(last, "reqs", None) or [])}
        chunked = getattr(scheduler, "chunked_req", None)
        if chunked is not None:
            live.add(chunked.rid)
        self._prune(live)

    def _prune(self, live: set[str]) -> None:
        for table in (self._wires, self._first_seen, self._admitted):
            for rid in [rid for rid in table if rid not in live]:
                del table[rid]
        self._requeued &= live
        self._resumed &= live | set(self.control.preempted)

    # -- marker -----------------------------------------------------------------------------------
    def write_marker(self, policy: Any) -> None:
        """Record that SGLang built our policy in this process (the adapter checks it)."""
        tree = getattr(policy, "tree_cache", None)
        core = getattr(tree, "tree_core", None)
        strategy = getattr(core, "eviction_strategy", None)
        info = {
            "pid": os.getpid(),
            "written_at": time.time(),
            "policy_class": type(policy).__name__,
            "tree_cache": type(tree).__name__,
            "tree_core": type(core).__name__,
            "eviction_strategy": type(strategy).__name__,
        }
        path = self.state_dir / f"{MARKER_PREFIX}{os.getpid()}.json"
        write_json_atomic(path, info)
        logger.warning("agentconsole plugin active in scheduler: %s", json.dumps(info))


def _fill_kv(status: SchedulerStatus, scheduler: Any) -> None:
    """KV use of the scheduler's token pool (best effort: fields differ across builds)."""
    try:
        capacity = int(scheduler.max_total_num_tokens)
        available = int(scheduler.token_to_kv_pool_allocator.available_size())
        status.kv_capacity_tokens = capacity
        status.kv_used_tokens = max(capacity - available, 0)
        status.kv_evictable_tokens = int(scheduler.tree_cache.evictable_size())
    except (AttributeError, TypeError, ValueError):
        pass
    try:
        pool = scheduler.token_to_kv_pool_allocator.get_kvcache()
        k_bytes, v_bytes = pool.get_kv_size_bytes()
        status.kv_bytes_per_token = int((k_bytes + v_bytes) // max(int(pool.size), 1))
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        pass
