"""A discrete-event model of an SGLang-like engine: the mechanism under every policy.

Mental model: the engine runs *blocks* (``blocks.py``). ``plan(now)`` admits queued calls in
policy order (fairness-guarded, O(log n) per decision) while slots and KV allow, possibly
preempting a worse-ranked decoding call, then starts one block: a chunked-prefill step, a fused
run of stall-free mixed steps, or a fused run of decode steps whose total time has a closed
form. ``complete(now)`` applies the block's tokens; ``interrupt(now)`` cuts a fused run at a
step boundary when outside work arrives. A single step is atomic, as on a GPU.

KV lives in a :class:`PrefixIndex` over HBM and host DRAM, owned by :class:`EngineKv`
(``kvstate.py``): a running call locks its matched prefix and reserves HBM for its uncached
prompt and its output; on finish its whole context is
inserted (unlocked, evictable by the eviction strategy, demoted to DRAM when there is room).
A prefix found in DRAM is reloaded over PCIe before prefill; a prefix that was computed before
and is gone is recomputed (counted as such). Eviction to admit a call takes KV softly retained
for a program in tool wait last; with bench's queued-call holds it spares it, unless the call is
an underserved tenant's (not starving) or the engine is idle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agentconsole.kvtiers.node import Block, Node
from agentconsole.kvtiers.tiers import Tier
from agentconsole.scheduler.composition import PrefillDeferral, passes_for
from agentconsole.scheduler.events import Event, EventKind, EventSink, Scalar
from agentconsole.scheduler.fairness import (
    STARVING_TIERS,
    TIER_UNDERSERVED,
    FairnessConfig,
    FairnessGuard,
)
from agentconsole.scheduler.policies.base import Policy
from agentconsole.scheduler.preemption import PreemptionRule
from agentconsole.scheduler.queue import QueueEntry, ReadyQueue
from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.runtime.sim.blocks import BlockPlanner, StepBlock
from agentconsole.server.runtime.sim.calls import EngineConfig, Phase, SimCall
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.kvstate import EngineKv


@dataclass(slots=True)
class Note:
    """Something the driver must react to: ``started``, ``first_token``, ``finished``,
    ``preempted`` or ``failed`` (the call can never run here)."""

    what: str
    call: SimCall
    path: list[Node] = field(default_factory=list)


class SimEngine:
    def __init__(
        self,
        cost: CostModel,
        policy: Policy,
        sink: EventSink,
        *,
        config: EngineConfig | None = None,
        fairness: FairnessConfig | None = None,
        preemption: PreemptionRule | None = None,
        name: str = "0",
        call_events: bool = True,
        labels: dict[str, Scalar] | None = None,
    ) -> None:
        """``call_events=False``: no call lifecycle events (queued, first token, finished,
        aborted, failed); for a caller that emits its own (``serve``'s live service), so they
        are not built only to be dropped."""
        self.name = name
        self._call_events = call_events
        #: extra fields of its stats events beside its name (its model and GPU count in a
        #: multi-model run)
        self.labels = labels or {}
        self.cost = cost
        self.config = config or EngineConfig()
        self.sink = sink
        self.guard = FairnessGuard(fairness)
        self.queue = ReadyQueue(policy, self.guard)
        # a request-level policy gets stock caching (see Policy.program_aware); a program-aware
        # one also keeps a queued call's cached context from being evicted under it
        self._holds = policy.program_aware and self.config.hold_queued_context
        self.preemption = preemption or PreemptionRule()
        self.kv = EngineKv(cost, self.config, sink)
        self.index = self.kv.index
        self.tiers = self.kv.tiers
        self.calls: dict[str, SimCall] = {}
        self.running: dict[str, SimCall] = {}  # admitted, in admission order
        #: running calls whose policy key moves with time, with the queue entry that follows
        #: it (their ``rank`` is re-read at each plan, as the plugin re-keys running requests)
        self._moving_ranks: dict[str, tuple[SimCall, QueueEntry]] = {}
        self._prefilling: dict[str, SimCall] = {}
        self._decoding: dict[str, SimCall] = {}
        self._loading: dict[str, SimCall] = {}
        self._decode_context = 0
        self._prefill_pending = 0  # prompt tokens admitted calls still have to prefill
        #: prefix tokens the admitted calls found cached, as their ``call.scheduled`` events
        #: say (the index counts every match, the many a queue's head makes before it fits)
        self.hit_tokens = 0
        self.planner = BlockPlanner(cost, self.config)
        self.deferral = PrefillDeferral(self.config.defer_prefill_steps)
        self._deferred_steps = 0  # decode steps in a row a pending prefill was deferred for
        #: the call whose prefill the block in flight defers (None: the block defers none)
        self._deferred_call: SimCall | None = None
        self._block: StepBlock | None = None
        self._notes: list[Note] = []
        self.busy_s = 0.0
        self.queued_demand = 0.0  # tokens the queued calls will need (tool-wait pressure)
        self.paused = False
        self._next_stats = 0.0
        self._stats_busy_s = -1.0  # the busy time the last stats sample reported

    # -- requests -------------------------------------------------------------------------
    def submit(self, call: SimCall, now: float) -> None:
        """Queue ``call`` under its ticket (its id must be new to the engine). Its program is
        back from its tool wait: what a keep decision retained for it is ordinary cache again
        (:meth:`release_kept`), as on SGLang."""
        self.kv.release_kept(call.ticket.program_id, now)
        call.phase = Phase.QUEUED
        call.submitted_at = call.queued_at = now
        if call.prompt_tokens + call.output_tokens > self.index.capacity(Tier.HBM):
            # it could never be admitted: fail it now rather than block the queue forever
            call.phase = Phase.ABORTED
            if self._call_events:
                reason = "context exceeds KV capacity"
                self._emit(now, EventKind.CALL_FAILED, call, {"reason": reason})
            self._notes.append(Note("failed", call))
            return
        self.calls[call.call_id] = call
        self._enqueue(call, now)
        if self._call_events:
            queued: dict[str, Scalar] = {"prompt_tokens": call.prompt_tokens}
            self._emit(now, EventKind.CALL_QUEUED, call, queued | call.labels)

    def abort(self, call_id: str, now: float) -> bool:
        """Remove a queued or running call at once; no token of it is delivered afterwards."""
        call = self.calls.pop(call_id, None)
        if call is None or call.phase in (Phase.DONE, Phase.ABORTED):
            return False
        if call.phase is Phase.QUEUED:
            self._dequeue(call)
        else:
            self._leave_running(call)
            self.kv.release(call)
        call.phase = Phase.ABORTED
        if self._call_events:
            self._emit(now, EventKind.CALL_ABORTED, call, self._usage(call, now))
        return True

    def preempt(self, call_id: str, now: float) -> bool:
        """Operator preempt: take a running call off the GPU and requeue it."""
        call = self.running.get(call_id)
        if call is None:
            return False
        self._preempt(call, now)
        return True

    def release_kept(self, program_id: str, now: float) -> int:
        """End the program's keep decision now (it ended, or its next call came); the tokens
        released. See :meth:`EngineKv.release_kept`."""
        return self.kv.release_kept(program_id, now)

    def apply_cache_action(
        self, program_id: str, nodes: list[Node], action: CacheAction, retain_s: float, now: float
    ) -> int:
        """Apply a tool-wait decision to ``nodes`` (the program's private context); returns the
        tokens it affected (see :meth:`EngineKv.apply_cache_action`)."""
        return self.kv.apply_cache_action(program_id, nodes, action, retain_s, now)

    def drain_notes(self) -> list[Note]:
        notes, self._notes = self._notes, []
        return notes

    # -- the loop ---------------------------------------------------------------------------
    def plan(self, now: float) -> float | None:
        """Admit what fits and start the next block; returns when to call :meth:`complete`
        (a block's end, or a wake-up for a reload finishing), or None when idle. A decode
        block may later be cut short by :meth:`interrupt` when new work arrives."""
        if self._block is not None:
            raise RuntimeError("plan() while a block is in flight")
        if self._moving_ranks:
            rank_at = self.queue.rank_at
            for call, entry in self._moving_ranks.values():
                call.rank = rank_at(entry, now)
        self._admit(now)
        if self.kv.blocked_until > now:
            return self.kv.blocked_until  # no pass runs until a write-back's copies are done
        wake = self._finish_loading(now) if self._loading else None
        until = wake if wake is not None else math.inf
        prefilling, decoding = self._prefilling.values(), self._decoding.values()
        self._deferred_call = None
        if prefilling:
            # the step's composition follows the policy's rank, not only its admission order
            first = min(prefilling, key=lambda c: c.rank)
            best = first.rank
            if self.config.rank_aware_steps and any(c.rank < best for c in decoding):
                # better-ranked calls are decoding: prefill only as much as hides under their
                # step's memory time (stall-free), so a worse-ranked long prefill neither
                # stretches their steps nor stops
                return self._run(
                    self.planner.stall_free_run(
                        now, until, prefilling, decoding, self._decode_context
                    )
                )
            if self.deferral.defers(
                [c.rank for c in decoding],
                best,
                self._deferred_steps,
                prefill_passes=passes_for(first.prefill_left, self.config.chunked_prefill_size),
                waiting_prefills=len(self._prefilling),
                deferred_s=first.deferred_s,
                service_s=first.ticket.service_estimate_s,
            ):
                self._deferred_call = first
                # or, as the SGLang plugin does, decode alone for a bounded streak, ending at
                # the first step boundary past the call's deferral cap (the plugin checks the
                # cap before each pass)
                left = self.deferral.passes_left(self._deferred_steps)
                block = self._decode_block(now, until, max_steps=left)
                capped = self.deferral.seconds_left(
                    first.deferred_s, first.ticket.service_estimate_s
                )
                if capped is not None:
                    self.planner.cut(block, now + capped)
                return self._run(block)
            budget = self.config.chunked_prefill_size
            return self._run(
                self.planner.prefill_step(now, prefilling, decoding, self._decode_context, budget)
            )
        if decoding:
            return self._run(self._decode_block(now, until))
        return wake

    def _decode_block(self, now: float, until: float, max_steps: int | None = None) -> StepBlock:
        """A decode run of every decoding call, at most ``max_steps`` steps: SGLang steps its
        whole running batch, whoever's tenant (the guard's share orders the queue, what is
        admitted, never which admitted calls step)."""
        calls = list(self._decoding.values())
        return self.planner.decode_run(now, until, calls, self._decode_context, max_steps=max_steps)

    def _finish_loading(self, now: float) -> float | None:
        """Calls whose reload ended by ``now`` start prefilling; when the next one ends."""
        for call in [c for c in self._loading.values() if c.ready_at <= now]:
            del self._loading[call.call_id]
            call.phase = Phase.PREFILL
            self._prefilling[call.call_id] = call
        return min((c.ready_at for c in self._loading.values()), default=None)

    def complete(self, now: float) -> None:
        """Apply the block that ends at ``now`` (a no-op at a mere wake-up)."""
        block, self._block = self._block, None
        if block is not None:
            self.busy_s += block.duration
            self._attribute_service(block, now)
            deferred = self._deferred_call
            if deferred is not None:
                deferred.deferred_s += block.duration
            self._deferred_steps = self._deferred_steps + block.decode_steps if deferred else 0
            if block.decode:
                self._complete_decode(block, now)
            if block.prefill:
                self._complete_prefill(block, now)
        if now >= self._next_stats:
            self._next_stats = now + self.config.stats_interval_s
            self._emit_stats(now)

    def final_stats(self, now: float) -> None:
        """The run ended at ``now``: report what the last blocks ran since the previous
        sample (``complete`` samples at most every ``stats_interval_s``, so up to that much
        busy time went unreported)."""
        if self.busy_s != self._stats_busy_s:
            self._emit_stats(now)

    def interrupt(self, now: float) -> float | None:
        """New work arrived while a fused run is in flight: cut the run at the first step
        boundary at or after ``now``. Returns the block's new end if it changed, else None."""
        block = self._block
        if block is None or not self.planner.cut(block, now):
            return None
        return block.end

    def _attribute_service(self, block: StepBlock, now: float) -> None:
        """Split the block's GPU time over the tokens it processed; credit tenants once each."""
        tokens = block.tokens
        if not tokens:
            return
        share = block.duration / tokens
        by_tenant: dict[str, float] = {}
        credited = by_tenant.get
        for call, chunk in block.prefill:
            seconds = share * chunk
            call.service_s += seconds
            tenant = call.ticket.tenant
            by_tenant[tenant] = credited(tenant, 0.0) + seconds
        per_call = share * block.decode_steps
        for call in block.decode:
            call.service_s += per_call
            tenant = call.ticket.tenant
            by_tenant[tenant] = credited(tenant, 0.0) + per_call
        record = self.guard.record_service
        for tenant, seconds in by_tenant.items():
            record(tenant, seconds, now)

    def protected_tokens(self, now: float) -> int:
        """Evictable HBM tokens that admission under the retention gate cannot take: softly
        retained for programs in tool wait (:meth:`EngineKv.retained_tokens`) or held for
        queued calls (:meth:`PrefixIndex.held_tokens`)."""
        return self.kv.retained_tokens(now) + self.index.held_tokens(Tier.HBM)

    @property
    def prefill_load(self) -> float:
        """Tokens waiting to be prefilled here (queued demand plus admitted prompts)."""
        return self.queued_demand + self._prefill_pending

    @property
    def load(self) -> float:
        """Prefill plus decode load, for picking the least loaded replica."""
        # prefill_load's sum, spelled out: the router asks every replica this per call
        return self.queued_demand + self._prefill_pending + self._decode_context

    @property
    def decode_load(self) -> int:
        """KV tokens the decode batch attends to (the router's decode load)."""
        return self._decode_context

    @property
    def in_flight(self) -> bool:
        """A block is running (the engine will be back at its end)."""
        return self._block is not None

    def idle(self) -> bool:
        return self._block is None and not self.running and not len(self.queue)

    # -- admission and preemption -----------------------------------------------------------
    def _admit(self, now: float) -> None:
        if self.paused:
            return
        while len(self.queue):
            head = self.queue.peek(now)
            if head is None:
                break
            call = self.calls[head.ticket.call_id]
            # retained KV is evicted last but for any call, as the plugin's eviction strategy
            # does in SGLang (it orders victims and holds no call back). Only bench's queued-
            # call holds, which serve does not have, make new work wait for held and retained
            # KV, but for a tenant below its fair share or an idle GPU
            reclaim = not self._holds or head.tier == TIER_UNDERSERVED or not self.running
            if len(self.running) < self.config.max_running_requests and self._start(
                call, now, reclaim_retained=reclaim
            ):
                call.rank = head.rank_at(now)
                if head.moves():
                    self._moving_ranks[call.call_id] = (call, head)
                continue
            if not self._preempt_for(head.ticket.call_id, now):
                break

    def _start(self, call: SimCall, now: float, *, reclaim_retained: bool = False) -> bool:
        """Admit ``call`` if its KV fits (:meth:`EngineKv.admit`: retained KV is spared unless
        ``reclaim_retained``); it prefills, after a reload from DRAM if its prefix was there."""
        got = self.kv.admit(call, now, reclaim_retained=reclaim_retained)
        if got is None:
            return False
        self._dequeue(call)
        call.ready_at = got.ready_at
        call.restore_s += got.ready_at - now
        # what a preemption threw away of an unfinished prefill is prefilled again: recompute
        recompute = got.recompute_tokens + call.discarded_tokens
        call.recompute_tokens += recompute
        call.admitted_recompute = recompute + call.carried_recompute
        call.carried_recompute = 0
        call.admitted_service_s = call.service_s
        call.admitted_computed = call.computed_tokens
        # prefix hits are those of the admission that prefills the prompt: a call re-admitted
        # after a preemption in decode finds its own prompt, which it computed (what of it is
        # gone is recompute, counted above); one whose prefill was cut short counts what it
        # finds cached now beyond what its first admission found
        first = not call.retractions
        hits = 0
        if first:
            hits = call.hit_tokens = got.hit_tokens
        elif (call.discarded_tokens or call.checkpointed_tokens) and (
            got.hit_tokens > call.hit_tokens + call.checkpointed_tokens
        ):
            # what others cached meanwhile; its own checkpointed blocks are its own work
            hits = got.hit_tokens - call.hit_tokens - call.checkpointed_tokens
            call.hit_tokens += hits
        call.discarded_tokens = 0
        self.hit_tokens += hits
        call.prefill_left = max(got.prefill_tokens, 1)  # the last token is recomputed for logits
        self._prefill_pending += call.prefill_left
        call.context_done = call.prompt_tokens + call.generated - call.prefill_left
        call.queue_s += now - call.queued_at
        call.admitted_at = now
        self.running[call.call_id] = call
        if got.loads:
            call.phase = Phase.LOADING
            self._loading[call.call_id] = call
        else:
            call.phase = Phase.PREFILL
            self._prefilling[call.call_id] = call
        self._emit(
            now,
            EventKind.CALL_SCHEDULED,
            call,
            {
                "queue_s": now - call.queued_at,
                "hit_tokens": hits,
                "reload_tokens": got.reload_tokens,
                "recompute_tokens": recompute,
            },
        )
        self._notes.append(Note("started", call))
        return True

    def _preempt_for(self, call_id: str, now: float) -> bool:
        """Preempt the worst-ranked decoding call for queued ``call_id`` if the rule allows.

        Only a decoding call is a victim, as in SGLang: its priority preemption takes victims
        from the running batch, which a chunked prefill joins only after its last chunk (a
        prefill cut short here lost its finished chunks to eviction under memory pressure and
        prefilled them again: recompute that ``fcfs``, which never preempts, does not pay;
        seen on seed-mix at 0.5x). Running calls are compared by their rank as of this plan
        (the tier they were admitted in, their policy key now), which keeps this O(running)
        with no key recomputation."""
        if not (self.queue.policy.preemptive and self.preemption.enabled) or not self.running:
            return False
        head = self.queue.entry(call_id)
        if head is None:
            return False
        want = head.rank_at(now)
        # the rule never lets it displace a starving call unless it starves too: the worst of
        # the others, as the plugin picks among the calls the rule allows
        # (``ordering.preemption_victims``)
        spare_starving = want[0] not in STARVING_TIERS
        victim = max(
            (
                c
                for c in self.running.values()
                if c.phase is Phase.DECODE and not (spare_starving and c.rank[0] in STARVING_TIERS)
            ),
            key=lambda c: c.rank,
            default=None,
        )
        if victim is None:
            return False
        per_token = self.cost.decode_step_seconds(1, victim.prompt_tokens)
        expected_left = max(victim.ticket.expected_output_tokens - victim.generated, 1.0)
        remaining_s = expected_left * per_token
        restore_s = self.cost.prefill_seconds(victim.context_done)
        resident_s = now - victim.admitted_at
        if not self.preemption.allows(
            want, victim.rank, resident_s, remaining_s, restore_s, victim.retractions
        ):
            return False
        self._preempt(victim, now)
        return True

    def _preempt(self, call: SimCall, now: float) -> None:
        self._leave_running(call)
        self.kv.release(call)
        if call.context_done >= call.prompt_tokens:
            # its prompt was fully prefilled: keep that KV as ordinary (evictable) cache, as
            # SGLang 0.5.23 does: the prompt went into the tree when its prefill ended
            # (batch_result_processor -> checkpoint_kv_cache), and a retraction or priority
            # preemption (release_req -> release_kv_cache(checkpoint=False)) frees only what
            # came after it, the output, which the re-admission recomputes (SimCall.generated)
            self.kv.insert(call.ticket.tenant, call.blocks, call.ticket.program_id, now)
        else:
            # its prefill was cut short: SGLang keeps the chunks it finished in its tree
            # (``cache_unfinished_req`` after each chunk); the simulator keeps the blocks they
            # finished, and frees the part of a block it had not (prefilled again, counted as
            # recompute, at its next admission); the recompute this admission had still to
            # reach is carried to the next
            ran = call.computed_tokens - call.admitted_computed
            kept = self._checkpoint(call, call.context_done - ran, now)
            call.checkpointed_tokens += kept
            call.discarded_tokens += ran - kept
            call.carried_recompute = max(call.admitted_recompute - ran, 0)
        call.retractions += 1
        call.phase = Phase.QUEUED
        call.queued_at = now
        self._enqueue(call, now)
        self._emit(now, EventKind.CALL_PREEMPTED, call, {"generated": call.generated})
        self._notes.append(Note("preempted", call))

    def _checkpoint(self, call: SimCall, present_at_admission: int, now: float) -> int:
        """Cache the whole blocks of ``call``'s prompt its cut-short prefill finished; returns
        how many of their tokens it computed this admission (beyond the ``present`` ones)."""
        done = min(call.context_done, call.prompt_tokens)
        covered = blocks = 0
        for block in call.blocks:
            if covered + block.tokens > done:
                break
            covered += block.tokens
            blocks += 1
        kept = covered - present_at_admission
        if kept <= 0:
            return 0
        self.kv.insert(call.ticket.tenant, call.blocks[:blocks], call.ticket.program_id, now)
        return kept

    @staticmethod
    def _demand(call: SimCall) -> float:
        t = call.ticket
        return t.prompt_tokens - t.cached_tokens + t.expected_output_tokens

    def _enqueue(self, call: SimCall, now: float) -> None:
        self.queue.push(call.ticket, now)
        call.queued_demand = self._demand(call)
        self.queued_demand += call.queued_demand
        if self._holds:
            self.kv.hold_queued(call)

    def _dequeue(self, call: SimCall) -> None:
        self.queue.remove(call.call_id)
        # what was added, not the demand of the ticket now: a re-ranked call's ticket is the
        # controller's newer one, and the difference once drove the sum below zero
        self.queued_demand -= call.queued_demand
        call.queued_demand = 0.0
        if not len(self.queue):
            self.queued_demand = 0.0  # no float residue of the sums survives an empty queue
        self.kv.release_queued(call)

    def _leave_running(self, call: SimCall) -> None:
        self.running.pop(call.call_id, None)
        self._moving_ranks.pop(call.call_id, None)
        if self._prefilling.pop(call.call_id, None) or self._loading.get(call.call_id):
            self._prefill_pending -= call.prefill_left
        self._loading.pop(call.call_id, None)
        if self._decoding.pop(call.call_id, None) is not None:
            self._decode_context -= call.prompt_tokens + call.generated

    # -- blocks -------------------------------------------------------------------------------
    def _run(self, block: StepBlock) -> float:
        self._block = block
        return block.end

    def _complete_prefill(self, block: StepBlock, now: float) -> None:
        for call, chunk in block.prefill:
            if call.phase is not Phase.PREFILL:
                continue  # aborted or preempted while the step ran
            call.prefill_left -= chunk
            self._prefill_pending -= chunk
            call.context_done += chunk
            call.computed_tokens += chunk
            if call.prefill_left:
                continue
            if call.admitted_recompute:
                # this admission's prefill: its service since admission, in the share of
                # its computed tokens that were recomputed (a call re-admitted after a decode
                # preemption re-added its whole service at every admission before)
                miss = max(call.computed_tokens - call.admitted_computed, 1)
                share = min(call.admitted_recompute / miss, 1.0)
                call.restore_s += (call.service_s - call.admitted_service_s) * share
            del self._prefilling[call.call_id]
            call.generated += 1
            call.last_token_at = now
            if call.first_token_at is None:  # a re-prefill after a preemption streams on
                self._first_token(call, now)
            if call.remaining_tokens <= 0:
                self._finish(call, now)
            else:
                call.phase = Phase.DECODE
                self._decoding[call.call_id] = call
                self._decode_context += call.prompt_tokens + call.generated

    def _first_token(self, call: SimCall, now: float) -> None:
        """``call`` streams its first token at ``now``: sets ``first_token_at`` (TTFT) and
        records it (event and note), once per call."""
        call.first_token_at = now
        if self._call_events:
            ttft = now - call.submitted_at
            self._emit(now, EventKind.CALL_FIRST_TOKEN, call, {"ttft_s": ttft})
        self._notes.append(Note("first_token", call))

    def _complete_decode(self, block: StepBlock, now: float) -> None:
        steps = block.decode_steps
        grew = 0
        for call in block.decode:
            if call.phase is not Phase.DECODE:
                continue
            call.generated += steps
            call.last_token_at = now
            grew += steps
        self._decode_context += grew
        for call in block.decode:
            if call.phase is Phase.DECODE and call.remaining_tokens <= 0:
                self._finish(call, now)

    def _finish(self, call: SimCall, now: float) -> None:
        self._leave_running(call)
        self.kv.release(call)
        call.phase = Phase.DONE
        self.calls.pop(call.call_id, None)
        tenant, program = call.ticket.tenant, call.ticket.program_id
        blocks = [*call.blocks, Block(call.output_key, call.output_tokens)]
        if call.finished_blocks is not None:  # serve's runtime: the answer's text after the prompt
            self.kv.insert(tenant, call.blocks, program, now)  # and the prompt as sent (a retry)
            blocks = call.finished_blocks
        inserted = self.kv.insert(tenant, blocks, program, now)
        if self._call_events:
            self._emit(now, EventKind.CALL_FINISHED, call, self._usage(call, now) | call.labels)
        self._notes.append(Note("finished", call, inserted.path))

    # -- events ---------------------------------------------------------------------------------
    def _usage(self, call: SimCall, now: float) -> dict[str, Scalar]:
        """A call's end event data. TTFT runs to its first token ever; TBT is the mean gap
        between its streamed tokens as a client sees them, from that first token to the last,
        so a preemption's stall (requeue and re-prefill) counts in it, as on ``serve``
        (``live/accounting.py``)."""
        first = call.first_token_at
        decode_tokens = max(call.generated - 1, 0)
        tbt = (call.last_token_at - first) / decode_tokens if first and decode_tokens else 0.0
        return {
            "prompt_tokens": call.prompt_tokens,
            "cached_tokens": call.hit_tokens,
            "computed_tokens": call.computed_tokens,
            "output_tokens": call.generated,
            "service_s": call.service_s,
            "queue_s": call.queue_s,
            "restore_s": call.restore_s,
            "ttft_s": (first - call.submitted_at) if first else 0.0,
            "tbt_s": tbt,
            "retractions": call.retractions,
            **self._insertion(call),
            **self._cross_model(call),
        }

    @staticmethod
    def _cross_model(call: SimCall) -> dict[str, Scalar]:
        """A call of a multi-model run: the tokens of its prompt another model had cached that
        it prefilled in full (lost cross-model reuse), reused from a compatible model, and
        prefilled for the layers not shared. Nothing for one model (events as they were)."""
        if call.foreign is None:
            return {}
        use = call.cross_model
        return {
            "cross_model_lost_tokens": use.lost,
            "cross_model_reused_tokens": use.reused,
            "cross_model_recompute_tokens": use.recompute,
        }

    @staticmethod
    def _insertion(call: SimCall) -> dict[str, Scalar]:
        """A call that inserted tokens mid-prompt: where (tokens before them), how many, and
        what of the suffix after them its prefix cache lost, reused and prefilled to correct;
        the same keys as ``serve``'s end events, so ``MetricsAggregator`` reads both. Nothing
        for a call that only appended (its events stay as they were)."""
        at = call.insert_at
        if at < 0:
            return {}
        return {
            "insertion_at_tokens": sum(b.tokens for b in call.blocks[:at]),
            "inserted_tokens": call.blocks[at].tokens,
            "lost_reuse_tokens": call.lost_reuse_tokens,
            "suffix_reused_tokens": call.suffix_reused_tokens,
            "correction_tokens": call.correction_tokens,
        }

    def _emit(self, now: float, kind: EventKind, call: SimCall, data: dict[str, Scalar]) -> None:
        t = call.ticket
        self.sink.emit(Event(now, kind, t.program_id, t.node_id, t.attempt, t.tenant, data))

    def _emit_stats(self, now: float) -> None:
        self._stats_busy_s = self.busy_s
        per_token = self.cost.kv_bytes_per_token
        self.sink.emit(
            Event(
                now,
                EventKind.ENGINE_STATS,
                # every engine names itself: the aggregator sums the latest report of each,
                # so replicas with one name would count only the last one's busy time
                data={
                    "engine": self.name,
                    "busy_s": self.busy_s,
                    "hbm_bytes": self.index.used(Tier.HBM) * per_token,
                    "dram_bytes": self.index.used(Tier.DRAM) * per_token,
                    "running": len(self.running),
                    "queued": len(self.queue),
                    **self.labels,
                },
            )
        )
