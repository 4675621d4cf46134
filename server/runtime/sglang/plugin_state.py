"""The plugin's state inside one SGLang scheduler process, and what each hook does with it.

One :class:`PluginState` per scheduler process (module singleton in ``plugin``). It reads
``control.json`` (mtime-cached, at most every 20 ms), decodes and caches each request's ticket,
ranks the waiting queue with :class:`~agentconsole.server.runtime.sglang.ordering.Orderer`
(keys kept across passes while they stand: ``keymemo``),
plans preemptions, credits measured step time to tenants, applies tool-wait retention hints to
the radix tree and writes ``status.json``. SGLang objects (``Req``, ``ScheduleBatch``,
``Scheduler``) are duck-typed (``Any``): only the fields listed in ``symbols`` are read.
What it remembers per request is in ``plugin_requests.RequestBook``, per program (contexts,
retention hints) in ``retention.RetentionBook``.

Clocks: tickets, control and status use the wall clock (``time.time()``); ticket times are
shifted by the adapter's ``clock_offset``. Under tensor parallelism (``lockstep``) every
decision reads the :class:`~agentconsole.server.runtime.sglang.lockstep.DecisionClock`
instead, control versions apply at their planned loop pass, and only rank 0 writes files.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from agentconsole.scheduler.composition import PrefillDeferral
from agentconsole.scheduler.fairness import FairnessConfig, FairnessGuard
from agentconsole.scheduler.preemption import PreemptionRule
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang import lockstep, plugin_status, retention, symbols, wire
from agentconsole.server.runtime.sglang.composition import (
    UNKNOWN_ROOM,
    PassRoom,
    StepComposer,
    admission_room,
)
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
from agentconsole.server.runtime.sglang.keymemo import KeyMemo, KeyMotion
from agentconsole.server.runtime.sglang.ordering import (
    Orderer,
    RunningView,
    ServiceMeter,
    preemption_priorities,
    preemption_victims,
)
from agentconsole.server.runtime.sglang.plugin_requests import RequestBook
from agentconsole.server.runtime.sglang.plugin_telemetry import (
    PluginTelemetry,
    report_queue_time,
    waiting_residency,
)
from agentconsole.server.runtime.sglang.ranked import Ranked
from agentconsole.server.runtime.sglang.status import SchedulerStatus
from agentconsole.server.runtime.sglang.steps import StepRecorder

logger = logging.getLogger("agentconsole.sglang.plugin")
_MAX_CONTEXTS = 4096
STATUS_INTERVAL_S = 0.1
#: the periodic status costs at most this share of the scheduler's time: it lists every queued
#: request (18 ms with 4,000 waiting), so a long queue spaces those writes out
#: (``bench_plugin_pass.py``); the writes that acknowledge a control change are not spaced
STATUS_TIME_SHARE = 0.05
_TOUCH_EVERY, _TOUCH_MAX = 32, 128  # SGLang's own cadence and bound for the same refresh
#: ordering passes between live matches of the waiting queue: with priority preemption SGLang
#: orders on every pass (each decode step), and a match is linear in the prompt
_LIVE_MATCH_EVERY = 8
_PRUNE_EVERY = 64  # loop passes between prunes of per-request tables in lockstep


def _config(cls: type[Any], data: dict[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


class PluginState:
    def __init__(self, state_dir: Path, layout: lockstep.Layout | None = None) -> None:
        """``layout``: this scheduler's ranks when known (tests); None: read from SGLang at
        the first pass (``bind_rank``)."""
        self.state_dir = state_dir
        self._control_file = CachedJsonFile(state_dir / CONTROL_FILE)
        self.control = ControlState()
        self.guard = FairnessGuard()
        self.orderer = Orderer(self.guard, self.control.policy)
        self.meter = ServiceMeter(self.guard)
        self.rule = PreemptionRule()
        self.composer = StepComposer()
        #: what this pass can admit (``admission_room``), read in its defer hook
        self._admission_room: PassRoom = UNKNOWN_ROOM
        self.requests = RequestBook()
        #: the keys of the last passes, reused while their inputs stand (``keymemo``)
        self.key_memo: KeyMemo[KeyMotion] = KeyMemo()
        self._overrides: dict[str, CallTicket] = {}
        self.retention = retention.RetentionBook(_MAX_CONTEXTS)
        self.steps = StepRecorder(state_dir / STEPS_FILE)
        self.telemetry = PluginTelemetry(state_dir)  # evictions, busy time, placement
        self._status_path = state_dir / STATUS_FILE
        self._rank_bound = False
        self.dp_rank: int | None = None  # this scheduler's data-parallel rank (None: no DP)
        self._status_at = 0.0
        self._status_cost_s = 0.0  # what the last status write took (``STATUS_TIME_SHARE``)
        self._passes = 0
        #: request id -> prompt tokens on the device at the last live match (``sort_waiting``)
        self._resident: dict[str, int] = {}
        #: request id -> prompt tokens on the device, for requests the deferral sized since
        #: the last live match that it missed (``_resident_of``); the ranking never reads it
        self._filled: dict[str, int] = {}
        #: the ``ControlState.ack_version`` the last status showed: while the applied
        #: control's differs (newer; or lower, from a control plane that restarted its count),
        #: someone waits to see it, and the next loop pass writes the status whatever it costs
        self._acked_version = -1
        self.preemptions = 0
        #: passes whose in-flight chunk shrank for outranking waiting requests
        self.chunk_caps = 0
        #: this pass capped the in-flight chunk (asked once a pass while one is in flight,
        #: before any admission): its room is for waiting requests whole
        self.chunk_capped = False
        #: passes whose KV room could not be read from SGLang (the chunk cap then counts
        #: request slots alone; should stay 0 on the pinned SGLang)
        self.kv_room_unknown = 0
        self.errors = 0
        self.last_error = ""
        self.layout = lockstep.Layout()
        self.lockstep = False  # see ``enable_lockstep``
        self.clock = lockstep.DecisionClock()
        self.step = 0  # scheduler loop passes begun
        self.rate = lockstep.StepRate()
        self._gate = lockstep.ControlGate(STATUS_FILE)
        if layout is not None:
            self._rank_bound = True
            self._bind_layout(layout)

    def enable_lockstep(self) -> None:
        """Take every decision from what all tensor-parallel ranks see alike (``lockstep``):
        the decision clock, control at its planned pass, tokens for the tenant share."""
        self.lockstep = True
        self.meter.deterministic = True

    def _bind_layout(self, layout: lockstep.Layout) -> None:
        self.layout = layout
        if layout.lockstep:
            self.enable_lockstep()

    def decision_time(self, wall: float) -> float:
        """The time decisions read: ``wall``, or in lockstep the decision clock."""
        return self.clock.now if self.lockstep else wall

    def strategy_clock(self) -> float:
        """The eviction strategy's clock (retention deadlines), as ``decision_time``."""
        return self.decision_time(time.time())

    # -- control ----------------------------------------------------------------------------------
    def refresh(self, wall: float, *, force: bool = False) -> bool:
        """Re-read ``control.json`` if it changed and apply it; returns True when a version
        was applied. Without ``force`` the file is looked at most every 20 ms (the loop-pass
        hook); the ordering pass forces a look, so a change is always in force before the
        scheduler orders its queue. In lockstep the file is looked at on every pass and a
        version applied only from its planned pass (``lockstep.ControlGate``)."""
        data, changed = self._control_file.poll(time.monotonic(), force=force or self.lockstep)
        if changed and data is not None:
            control = ControlState.from_json(data)
            if not self.lockstep:
                self._apply(control)
                return True
            self._gate.offer(control, self.step, self.clock)
        due = self._gate.due(self.step, self.clock) if self.lockstep else None
        if due is None:
            return False
        self._apply(due)
        return True

    def _apply(self, control: ControlState) -> None:
        self.clock.observe(control.written_at, self.step)
        rules_changed = (
            control.policy != self.control.policy or control.fairness != self.control.fairness
        )
        self.control = control
        self.orderer.set_policy(control.policy)
        self.rule = _config(PreemptionRule, control.preemption)
        self.composer.deferral = _config(PrefillDeferral, control.deferral)
        self._overrides = {
            rid: CallTicket.from_params(params) for rid, params in control.tickets.items()
        }
        if rules_changed:
            # what every key is computed under; the rest a key reads is among its memo inputs
            # (control is written on every tool-wait hint: clearing on each would empty it)
            self.key_memo.clear()
            self.composer.rules_changed()
            try:
                self.guard.configure(_config(FairnessConfig, control.fairness))
            except (TypeError, ValueError) as err:  # a malformed value: the old rules stand
                self.record_error("fairness", err)

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
        return self.requests.wire_of(req)

    def rank(self, reqs: list[Any], wall: float, *, report: bool = False) -> list[Ranked]:
        """Effective keys of ``reqs`` at ``wall`` (a ``report`` changes no state), tickets
        refreshed with the last live match of the waiting queue (``_resident``), so the sort,
        the preemption plan and the status report rank alike."""
        preempted = self.control.preempted
        book = self.requests
        live = self._resident
        cands = [
            book.candidate(
                r, wall, preempted.get(r.rid), record=not report, resident_tokens=live.get(r.rid)
            )
            for r in reqs
        ]
        return self.orderer.rank(
            cands,
            wall,
            boosts=self.control.boosts,
            tickets=self._overrides,
            remember=not (report or self.lockstep),
            recompute_s_per_token=self.meter.prefill_token_s,
            memo=self.key_memo,
            memo_store=not report,
        )

    def sort_waiting(self, waiting: list[Any], wall: float, tree: Any = None) -> None:
        """Sort SGLang's waiting queue in place, best effective key first (after applying a
        control change, so retention marks are in place before this pass allocates KV; in
        lockstep that happened at the start of the pass, and the waiting requests' send times
        move the decision clock)."""
        if self.lockstep:
            for req in waiting:
                w = self.wire_of(req)
                self.clock.observe(w.sent if w is not None else None, self.step)
        elif self.refresh(wall, force=True):
            self.apply_retention(tree, wall)
        wall = self.decision_time(wall)
        if tree is not None and self._passes % _LIVE_MATCH_EVERY == 0:
            # the live match, as ``lpm`` takes it: what the tree holds of each prompt now
            self._resident = waiting_residency(tree, waiting)
            self._filled = {}
        ranked = self.rank(waiting, wall)
        for r in ranked:
            self.requests.seen_waiting(r.candidate, wall)
        if self.paused:
            # a drain refuses every call that never ran, and SGLang's admission loop stops at
            # its first refusal: calls that ran (retracted, preempted) go first, or one ranked
            # behind a refused newcomer would wait out the drain, which waits for it
            ran = self.requests.ran
            order = sorted(
                range(len(waiting)), key=lambda i: (not ran(waiting[i].rid), ranked[i].key)
            )
        else:
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
        wall = self.decision_time(time.time())
        live = [r for r in running if not r.finished()]
        ranked = self.rank([req, *live], wall)
        want = ranked[0].key
        views = []
        for r, rk in zip(live, ranked[1:], strict=True):
            if rk.key <= want:
                continue  # ranked at least as well as the waiting request: never a victim
            w = self.wire_of(r)
            generated = len(r.output_ids)
            views.append(
                RunningView(
                    r.rid,
                    rk.key,
                    self.requests.resident_s(r.rid, wall),
                    self.meter.remaining_s(w.ticket if w else None, generated),
                    self.meter.restore_s(len(r.origin_input_ids) + generated),
                    protected=w is None or w.kind is wire.CallKind.PROBE,
                    preemptions=self.requests.reentries.get(r.rid, 0),
                )
            )
        preemptive = self.orderer.policy.preemptive
        victims = preemption_victims(want, views, self.rule, preemptive=preemptive)
        if not victims:
            return None
        chosen = set(victims)
        others = [r.rid for r in live if r.rid not in chosen]
        return preemption_priorities(victims, others, threshold)

    # -- step composition (``composition``) ------------------------------------------------------
    def rank_keys(self, reqs: list[Any]) -> list[Any]:
        """The effective keys of ``reqs`` now, in order; changes no state."""
        wall = self.decision_time(time.time())
        return [r.key for r in self.rank(reqs, wall, report=True)]

    def defer_prefill(self, scheduler: Any, running_batch: Any) -> bool:
        """Whether this pass decodes and leaves the pending prefill for later (see
        ``StepComposer.defer_prefill``); never while draining (nothing is admitted then)."""
        # the pass's room, for the chunk cap asked next in the same pass (cleared first: a
        # count from an earlier pass never stands in for this one's)
        self._admission_room = UNKNOWN_ROOM
        self._admission_room = admission_room(scheduler, running_batch)
        if self.paused or getattr(running_batch, "is_prefill_only", False):
            return False  # a prefill-only batch never decodes: deferring would idle the pass
        reqs = list(getattr(running_batch, "reqs", None) or [])
        waiting = scheduler.waiting_queue
        return self.composer.defer_prefill(
            self.rank_keys,
            reqs,
            scheduler.chunked_req,
            waiting,
            self._admission_room,
            residency=lambda pending: self._resident_of(
                getattr(scheduler, "tree_cache", None), pending
            ),
            chunk_tokens=getattr(scheduler, "chunked_prefill_size", None),
            max_running=getattr(scheduler, "max_running_requests", None),
            service_s=self._service_estimate,
            pass_s=self.meter.decode_step_s,  # a deferred pass decodes
        )

    def _service_estimate(self, req: Any) -> float:
        """The predicted service of ``req``'s call (its ticket's; 0.0: no ticket, unknown)."""
        carried = self.requests.wire_of(req)
        return carried.ticket.service_estimate_s if carried is not None else 0.0

    def _resident_of(self, tree: Any, reqs: list[Any]) -> dict[str, int]:
        """Request id -> prompt tokens on the device for ``reqs``: the waiting queue's last
        live match (``_resident``), and for a request it missed (an arrival since, or one
        past its budget) a match made now and kept in ``_filled`` until the next live match,
        so each is matched at most once between two. The ranking reads only the live match.
        Without the fill a fresh arrival counts as wholly uncached: a prompt the device
        mostly holds looks like a prefill of many chunks and is deferred as one."""
        live, filled = self._resident, self._filled
        missing = [r for r in reqs if r.rid not in live and r.rid not in filled]
        if missing and tree is not None:
            filled.update(waiting_residency(tree, missing))
        return {
            r.rid: tokens
            for r in reqs
            if (tokens := live.get(r.rid, filled.get(r.rid))) is not None
        }

    def chunk_limit(
        self, chunked: Any, waiting: list[Any], budget: int, page_size: int, tree: Any
    ) -> int | None:
        """The cap on ``chunked``'s next chunk (``StepComposer.chunk_limit``); None while
        draining (no waiting request would use the room) and without a radix cache (SGLang
        then admits ``ignore_eos`` requests by a path that can start a second chunked
        request in the room left)."""
        # the count read in this pass's defer hook, used once: a pass that skipped the hook
        # (SGLang's own interval deferred it, another scheduler loop) leaves no stale count
        room, self._admission_room = self._admission_room, UNKNOWN_ROOM
        self.chunk_capped = False
        if self.paused or getattr(tree, "disable", False):
            return None
        # counted where it is used: SGLang loops that skip the defer hook leave it unknown
        self.kv_room_unknown += bool(waiting) and room.tokens is None
        limit = self.composer.chunk_limit(
            self.rank_keys,
            lambda reqs: waiting_residency(tree, reqs),
            chunked,
            waiting,
            budget,
            page_size,
            room,
        )
        self.chunk_capped = limit is not None
        self.chunk_caps += self.chunk_capped
        return limit

    # -- steps ------------------------------------------------------------------------------------
    def on_step(self, batch: Any, start: float, seconds: float, *, forward: bool) -> None:
        """Credit one measured step phase (a forward, or its result processing) to its
        requests; with ``record_steps`` on, record it for calibration (lockstep: each
        forward's tokens, once, at the decision clock; only rank 0 records)."""
        wall = self.decision_time(time.time())
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
        # tokens per tenant: the guard's credit is linear in them, and one entry per tenant
        # rather than per request keeps this off the decode step at a batch of hundreds
        tokens_of: dict[str, int] = {}
        for req, tokens in zip(reqs, extend, strict=True):
            w = self.wire_of(req)
            tenant = w.ticket.tenant if w else ""
            tokens_of[tenant] = tokens_of.get(tenant, 0) + int(tokens)
            if forward:  # the result phase processes the requests the forward ran
                self._note_running(req, w, wall)
        if forward or not self.lockstep:
            self.meter.credit(list(tokens_of.items()), seconds, wall, prefill=prefill)
        if not self.control.record_steps or not self.layout.writer:
            return
        if forward:
            self.steps.forward(batch, reqs, extend if prefill else [], start, seconds)
        else:
            self.steps.result(batch, seconds)

    def on_scheduled(self, plan: Any, seconds: float) -> None:
        """The scheduler spent ``seconds`` forming ``plan`` (its next batch, if any)."""
        if self.control.record_steps and self.layout.writer:
            self.steps.scheduled(getattr(plan, "batch_to_run", None), seconds)

    def _note_running(self, req: Any, w: wire.WireTicket | None, wall: float) -> None:
        if self.requests.seen_running(req.rid, wall):  # out of the queue, maybe again
            report_queue_time(req)
        if w is not None and w.kind is wire.CallKind.CALL:
            ctx = retention.Context(
                req.origin_input_ids,
                req.output_ids,
                getattr(req, "extra_key", None),
                getattr(req, "cache_salt", None),
            )
            self.retention.note(w.ticket.program_id, ctx)

    def on_preempted(self, count: int) -> None:
        """Count preemptions (the next periodic status shows them: nothing waits on it)."""
        self.preemptions += count

    # -- data-parallel rank -------------------------------------------------------------------
    def bind_rank(self) -> None:
        """Name this scheduler's files after its data-parallel rank (``control.rank_file``).
        Not at construction: SGLang loads plugins before it publishes the process's ranks, so
        the rank is read once the scheduler exists (its policy's constructor, or the first
        loop pass)."""
        if self._rank_bound:
            return
        self._rank_bound = True
        self._bind_layout(lockstep.layout())
        rank = self.dp_rank = plugin_status.data_parallel_rank()
        if rank is None:
            return
        self._gate.key = rank_file(STATUS_FILE, rank)
        self._status_path = self.state_dir / rank_file(STATUS_FILE, rank)
        self.steps.path = self.state_dir / rank_file(STEPS_FILE, rank)
        if self.telemetry.placement is not None:
            self.telemetry.placement.path = self.state_dir / rank_file(PLACEMENT_FILE, rank)

    # -- once per scheduler loop pass -------------------------------------------------------------
    def begin_pass(self, scheduler: Any) -> None:
        """Count the pass; in lockstep apply the control version due at it (and its
        retention hints) before the pass orders anything."""
        self.bind_rank()
        self.step += 1
        if self.lockstep and self.refresh(self.clock.now):
            self.apply_retention(getattr(scheduler, "tree_cache", None), self.clock.now)

    def on_loop(self, scheduler: Any, plan: Any = None) -> None:
        """Poll control, apply new retention hints, publish status when due (rank 0 only in
        lockstep, where the per-request tables are pruned every ``_PRUNE_EVERY`` passes on
        every rank alike instead). ``plan``: the pass's batch plan (its requests are live)."""
        self.bind_rank()
        wall = time.time()
        if not self.lockstep and self.refresh(wall):
            self.apply_retention(getattr(scheduler, "tree_cache", None), wall)
        if self.lockstep and self.step % _PRUNE_EVERY == 0:
            self._forget_all_but(plugin_status.live_rids(scheduler, plan=plan))
        if not self.layout.writer:
            return
        self.write_status_if_due(scheduler, wall, plan)
        self.telemetry.on_loop(scheduler, self.retention.contexts)

    def write_status_if_due(self, scheduler: Any, wall: float, plan: Any = None) -> bool:
        """Write ``status.json`` if it is due: at once after a control change the adapter
        waits to see acknowledged (``ControlState.ack_version``; the scheduler may go idle
        after this pass); otherwise every ``STATUS_INTERVAL_S`` and, with one rank deciding
        alone, within its share of the scheduler's time (``STATUS_TIME_SHARE`` of the time
        since the last write, at what that write took). Under tensor parallelism the writer
        plans when every rank applies a control from the status's pass count and rate, so it
        stays at the interval. Returns whether it wrote."""
        since = wall - self._status_at  # negative after the wall clock stepped back: write
        gap = STATUS_INTERVAL_S
        if not self.lockstep:
            gap = max(gap, self._status_cost_s / STATUS_TIME_SHARE)
        ack_due = self.control.ack_version != self._acked_version
        if not ack_due and 0.0 <= since < gap:
            return False
        started = time.perf_counter()
        self.publish(scheduler, wall, plan)
        self._status_cost_s = time.perf_counter() - started
        self._status_at = wall
        self._acked_version = self.control.ack_version
        return True

    def apply_retention(self, tree: Any, wall: float) -> None:
        """Mark the radix tree for every retention hint not applied yet. A hint with an
        action nobody defined marks nothing and is counted as an error here, so the pass's
        status and telemetry still run (the other hints are applied)."""
        try:
            self.retention.apply(tree, self.control.retention)
        except ValueError as err:
            self.record_error("retention", err)

    def publish(self, scheduler: Any, wall: float, plan: Any = None) -> None:
        """Write ``status.json`` from the scheduler's live state; prunes per-request caches
        (not in lockstep: see ``on_loop``)."""
        waiting = list(getattr(scheduler, "waiting_queue", []) or [])
        running_batch = getattr(scheduler, "running_batch", None)
        running = [r for r in (getattr(running_batch, "reqs", None) or []) if not r.finished()]
        now = self.decision_time(wall)
        ranked = sorted(self.rank(waiting, now, report=True), key=lambda r: r.key)
        self.rate.observe(self.step, wall)
        status = SchedulerStatus(
            pid=os.getpid(),
            written_at=wall,
            control_version=self.control.version,
            policy=self.orderer.policy_name,
            paused=self.paused,
            queued=plugin_status.queued_entries(ranked, wall, waiting),
            running=plugin_status.running_entries(
                running, self.wire_of, self.requests.admitted, wall
            ),
            retained_tokens=self.retention.kept_tokens(wall),
            tenant_service_s=dict(self.meter.service_s),
            preemptions=self.preemptions,
            prefill_deferrals=self.composer.deferrals,
            chunk_caps=self.chunk_caps,
            kv_room_unknown=self.kv_room_unknown,
            keys_reused=self.key_memo.reused,
            keys_computed=self.key_memo.computed,
            errors=self.errors,
            last_error=self.last_error,
            step=self.step if self.lockstep else 0,
            steps_per_s=self.rate.per_s,
            late_controls=self._gate.late,
        )
        plugin_status.fill_kv(status, scheduler)
        self.telemetry.fill(status, scheduler)
        try:
            write_json_atomic(self._status_path, status.to_json())
        finally:
            # pruned even when the write fails (a full disk, every pass): the per-request
            # tables would otherwise grow with every request the engine ever saw
            if not self.lockstep:
                self._forget_all_but(plugin_status.live_rids(scheduler, waiting, running, plan))

    def _forget_all_but(self, live: set[str]) -> None:
        """Drop what is kept per request for requests the scheduler no longer holds."""
        self.requests.prune(live, self.control.preempted)
        self.key_memo.retain(live)

    def write_marker(self, policy: Any) -> None:
        """Record that SGLang built our policy in this process (the adapter checks it)."""
        self.bind_rank()
        plugin_status.write_marker(self.state_dir, policy, self.dp_rank)
