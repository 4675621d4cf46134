"""Where a simulated engine's KV lives: the prefix index over HBM and DRAM, the host link,
soft retention for programs in tool wait, and what was ever computed (to count recomputes).

:class:`EngineKv` is the KV half of ``SimEngine``: the engine decides *which* call runs; this
decides whether its KV fits, what must be evicted, reloaded or recomputed first, and records
the ``kv.*`` events. Every method changes the index only as its docstring says.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from dataclasses import dataclass

from agentconsole.kvtiers.node import Block, Node
from agentconsole.kvtiers.prefix_index import PrefixIndex
from agentconsole.kvtiers.results import InsertResult, KVMove
from agentconsole.kvtiers.tiers import WRITE_THROUGH, Tier, TierModel
from agentconsole.scheduler.events import Event, EventKind, EventSink
from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.runtime.sim.calls import EngineConfig, SimCall
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.crossmodel import NO_USE, CrossModelUse
from agentconsole.server.runtime.sim.recentkeys import RecentKeys


@dataclass(frozen=True, slots=True)
class Admission:
    """What admitting a call found: ``ready_at`` (after any write-back of what its admission
    evicted to DRAM and any reload from DRAM), the prefix ``hit_tokens``, the ``reload_tokens``
    moved back to HBM, the ``recompute_tokens`` that were computed once and are gone, the
    ``miss_tokens`` with no KV on the matched prefix, and the ``write_back_tokens`` it copied
    to DRAM on evicting them (write-back only).

    After a mid-prompt insertion (:class:`SuffixReuse`) the prefix cache mode reuses
    ``suffix.reused`` of those misses at a cost of ``suffix.correction`` prefilled tokens."""

    ready_at: float
    hit_tokens: int
    reload_tokens: int
    recompute_tokens: int
    miss_tokens: int
    suffix: SuffixReuse
    #: what it made of other models' KV of its prompt (``crossmodel.py``)
    cross: CrossModelUse = NO_USE
    write_back_tokens: int = 0
    #: part of its prefix is still being reloaded to HBM for another call: it waits for it
    landing: bool = False

    @property
    def prefill_tokens(self) -> int:
        """Tokens to prefill: the misses, less a reused suffix and another model's reused
        KV, plus their correction and the recompute of the layers not shared."""
        cross = self.cross.reused - self.cross.recompute
        return self.miss_tokens - self.suffix.reused + self.suffix.correction - cross

    @property
    def loads(self) -> bool:
        """Whether it waits on the host link before it prefills: KV must arrive (its own
        reload or another call's), or what it evicted must be written back first."""
        return bool(self.reload_tokens or self.cross.copy or self.write_back_tokens or self.landing)


@dataclass(frozen=True, slots=True)
class SuffixReuse:
    """A call's context after the tokens it inserted mid-prompt, as its program's previous
    context still holds it: ``resident`` tokens on HBM right after the insertion point (the
    old path, ``path``, root-first); the mode reuses ``reused`` of them for ``correction``
    prefilled tokens; the rest of ``resident`` is ``lost`` reuse (prefilled again although
    its KV is there). ``blocks`` is how many of the call's blocks after the insertion that
    resident run covers."""

    resident: int = 0
    reused: int = 0
    correction: int = 0
    blocks: int = 0
    path: tuple[Node, ...] = ()

    @property
    def lost(self) -> int:
        return self.resident - self.reused


NO_SUFFIX = SuffixReuse()


@dataclass(slots=True)
class KeepDecision:
    """A program's standing keep decision: the KV it softly retains until ``until``."""

    number: int
    tokens: int
    nodes: list[Node]
    until: float


class EngineKv:
    """The KV state of one simulated engine (see the module docstring)."""

    def __init__(self, cost: CostModel, config: EngineConfig, sink: EventSink) -> None:
        self.cost = cost
        self.config = config
        self.sink = sink
        dram = config.host_kv_tokens
        if dram is None:
            dram = cost.dram_kv_capacity_tokens()
        hbm = (
            config.hbm_kv_tokens
            if config.hbm_kv_tokens is not None
            else cost.hbm_kv_capacity_tokens(config.mem_fraction_static)
        )
        self.write_through = config.host_write_policy == WRITE_THROUGH
        if self.write_through:
            # every node is copied to DRAM when inserted and keeps its copy while on HBM
            # (SGLang backs a node up at its first hit, write_through_threshold 1), so the
            # DRAM tier's room for KV only DRAM holds is what HBM's copies leave
            dram = max(dram - hbm, 0)
        self.tiers = TierModel.build(
            kv_bytes_per_token=cost.kv_bytes_per_token,
            hbm_tokens=hbm,
            dram_tokens=dram,
            dram_bandwidth=cost.gpu.host_link_bw * cost.tp,
        )
        self.index = PrefixIndex(self.tiers, config.eviction, demote=dram > 0)
        # keep decisions: (deadline, number, program) in deadline order, and each program's
        # standing one; a heap entry whose number is no longer its program's standing one's
        # was joined by a later decision or released
        self._retained: list[tuple[float, int, str]] = []
        self._kept: dict[str, KeepDecision] = {}
        self._keep_number = 0
        self._retained_tokens = 0
        #: each program's offloaded context, soft-retained on DRAM until it is back or ends
        self._offloaded: dict[str, list[Node]] = {}
        self._computed = RecentKeys(config.computed_keys_kept)
        self._link_free_at = 0.0
        #: until when the engine runs no pass: a write-back eviction's copies must reach the
        #: host first (SGLang's ``_evict`` ends in a blocking ``writing_check(write_back=True)``
        #: on its scheduler thread, so every call waits, not only the one that evicted)
        self.blocked_until = 0.0

    # -- admission and release ----------------------------------------------------------------
    def admit(self, call: SimCall, now: float, *, reclaim_retained: bool) -> Admission | None:
        """Make room for ``call`` and take it: lock its matched prefix, start reloading what of
        it sits in DRAM, reserve HBM for its misses and output (``call.path``,
        ``call.reserved``). None, with nothing held or evicted, when it does not fit.

        Eviction spares KV softly retained for a program in tool wait (its priority is in the
        future) unless ``reclaim_retained``: new work waits instead of destroying the context
        of work in flight; retention deadlines bound the wait. What it evicts to DRAM is
        written back over the host link before it starts under write-back; written through,
        it was copied when inserted (:meth:`_copied_on_eviction`)."""
        index = self.index
        found = index.match(call.ticket.tenant, call.blocks, now)
        index.lock(found.path)
        suffix = self._suffix(call, len(found.path))
        if suffix.reused:
            index.lock(suffix.path)  # its KV is read while the call corrects it into place
        slow = [n for n in found.path if n.tier is not Tier.HBM]
        slow_tokens = sum(n.tokens for n in slow)
        miss = found.miss_tokens + call.generated  # a resumed call recomputes what it generated
        own = miss + call.remaining_tokens
        # one all-or-nothing step: a call turned away evicts nothing, and a victim can take
        # the DRAM room its reload frees
        max_priority = None if reclaim_retained else now
        moved = index.promote(slow, Tier.HBM, now, room=own, max_priority=max_priority)
        if not moved.ok and suffix.reused:
            # the locked suffix holds HBM the call also reserves for its misses (they are
            # not its until corrected): where both do not fit, the call goes without the
            # reuse rather than never (it waited for good, its program unfinished)
            index.unlock(suffix.path)
            suffix = NO_SUFFIX
            moved = index.promote(slow, Tier.HBM, now, room=own, max_priority=max_priority)
        if not moved.ok:
            index.unlock(found.path)
            return None
        evicted = [m for m in moved.moves if m.evicted]
        self._emit_evictions(evicted, now)
        written = self._copied_on_eviction(evicted)
        ready_at = self._write_back(now, written) if written else now
        landing = False
        if now < self._link_free_at:
            # another call's reload may still be copying part of this prefix to HBM: its
            # nodes are on HBM in the index already, their KV not before the copy ends
            lands = index.landed_at(found.path)
            landing = lands > now
            ready_at = max(ready_at, lands)
        if slow:
            ready_at = max(ready_at, self._transfer(now, moved.moved_tokens))
            index.landing(slow, ready_at)
            self._emit(now, EventKind.KV_RELOADED, call.ticket.program_id, moved.moved_tokens)
        if not index.reserve(Tier.HBM, own):
            raise AssertionError("make_room succeeded but the reservation does not fit")
        cross = self._cross_model(call, found.hit_tokens, found.miss_tokens, suffix)
        if cross.copy:  # the shared layers' KV comes over the link, after any reload
            ready_at = max(ready_at, self._transfer(now, cross.copy))
        call.reserved = own
        call.path = found.path
        if suffix.reused:
            call.suffix_path = list(suffix.path)
        call.lost_reuse_tokens += suffix.lost
        call.suffix_reused_tokens += suffix.reused
        call.correction_tokens += suffix.correction
        # the resident suffix is reused or lost reuse, not a recompute of what was evicted
        skip = range(call.insert_at + 1, call.insert_at + 1 + suffix.blocks)
        recompute = call.generated
        computed, blocks, tenant = self._computed, call.blocks, call.ticket.tenant
        for i in range(len(found.path), len(blocks)):
            block = blocks[i]
            before = _scoped(tenant, blocks[i - 1]) if i else None
            if i not in skip and computed.computed_after(_scoped(tenant, block), before):
                recompute += block.tokens
        if recompute:
            self._emit(now, EventKind.KV_RECOMPUTED, call.ticket.program_id, recompute)
        return Admission(
            ready_at,
            found.hit_tokens,
            slow_tokens,
            recompute,
            miss,
            suffix,
            cross,
            written,
            landing,
        )

    def _cross_model(
        self, call: SimCall, hit: int, misses: int, suffix: SuffixReuse
    ) -> CrossModelUse:
        """What ``call`` makes of other models' KV under the engine's mode, recorded on the
        call (its last admission's). A reused suffix after an insertion excludes it: the
        misses are then not one prefix run another model could hold."""
        if call.foreign is None:
            return NO_USE
        mode = self.config.cross_model
        call.cross_model = NO_USE if suffix.reused else mode.use(call.foreign, hit, misses)
        return call.cross_model

    def _suffix(self, call: SimCall, matched: int) -> SuffixReuse:
        """What of ``call``'s context after its insertion the previous context still holds
        on HBM, and what the engine's prefix cache mode makes of it (changes nothing).

        Only when the match stopped at the inserted tokens: a call whose own inserted context
        is cached (re-admitted after a preemption) has no insertion left to pay for."""
        at = call.insert_at
        if at < 0 or matched != at:
            return NO_SUFFIX
        before = [*call.blocks[:at], *call.blocks[at + 1 :]]
        old = self.index.peek(call.ticket.tenant, before).path
        run = 0
        for node in old[at:]:
            if node.tier is not Tier.HBM:
                break  # tiers never get faster down a path: the HBM run ends here
            run += 1
        if not run:
            return NO_SUFFIX
        resident = sum(n.tokens for n in old[at : at + run])
        reused, correction = self.config.prefix_cache.reuse(resident)
        return SuffixReuse(resident, reused, correction, run, tuple(old[: at + run]))

    def hold_queued(self, call: SimCall) -> None:
        """Soft-hold what of ``call``'s context is cached while it waits in the queue
        (:meth:`PrefixIndex.hold`): admissions spare it like retained KV, so a flood of new
        programs cannot evict the context of a program in flight just before it is needed
        (the thrash that makes stock engines recompute under overload)."""
        call.held = self.index.peek(call.ticket.tenant, call.blocks).path
        self.index.hold(call.held)

    def release_queued(self, call: SimCall) -> None:
        """Undo :meth:`hold_queued` (the call was admitted or aborted)."""
        if call.held:
            self.index.unhold(call.held)
            call.held = []

    def release(self, call: SimCall) -> None:
        """Unlock ``call``'s prefix and give back its reservation."""
        if call.path:
            self.index.unlock(call.path)
            call.path = []
        if call.suffix_path:
            self.index.unlock(call.suffix_path)
            call.suffix_path = []
        if call.reserved:
            self.index.release(Tier.HBM, call.reserved)
            call.reserved = 0

    def insert(self, tenant: str, blocks: list[Block], owner: str, now: float) -> InsertResult:
        """Cache a computed context (evictable) and remember its blocks as computed; evicts only
        if the call's released reservation was not enough, e.g. after sharing blocks changed
        (what it evicts to DRAM under write-back is copied over the host link)."""
        inserted = self.index.insert(tenant, blocks, now, owner=owner)
        if not inserted.complete:
            need = sum(b.tokens for b in blocks[len(inserted.path) :])
            evicted = self.index.make_room(Tier.HBM, need, now).moves
            self._emit_evictions(evicted, now)
            written = self._copied_on_eviction(evicted)
            if written:
                self._write_back(now, written)
            inserted = self.index.insert(tenant, blocks, now, owner=owner)
        self._computed.remember([_scoped(tenant, b) for b in blocks])
        return inserted

    # -- tool waits ----------------------------------------------------------------------------
    def apply_cache_action(
        self, program_id: str, nodes: list[Node], action: CacheAction, retain_s: float, now: float
    ) -> int:
        """Apply a tool-wait decision to ``nodes`` (the program's private context); returns the
        tokens it affected."""
        if not nodes:
            return 0
        if action is CacheAction.KEEP:
            kept = self.index.retain(nodes, now + retain_s, now)
            self._keep(program_id, nodes, now + retain_s, now)
            return kept
        self.release_kept(program_id, now)  # what it kept is moved or dropped now
        if action is CacheAction.OFFLOAD:
            moved = self.index.move(nodes, Tier.DRAM, now)
            if moved.moved_tokens:
                if not self.write_through:  # written through, the copy is on DRAM already
                    self._transfer(now, moved.moved_tokens)
                self._emit(now, EventKind.KV_OFFLOADED, program_id, moved.moved_tokens)
            # soft-retained on DRAM for ``retain_s``, as the tool-wait policies price an
            # offload and the door counts it as kept: demotions from HBM do not push it out
            # before the deadline; the program's return or end releases it (release_kept)
            offloaded = [n for n in nodes if n.tier is Tier.DRAM and not n.dead]
            if offloaded:
                self.index.retain(offloaded, now + retain_s, now)
                self._offloaded[program_id] = offloaded
            return moved.moved_tokens
        dropped = self.index.drop(nodes, now)
        if dropped.moved_tokens:
            self._emit(now, EventKind.KV_DROPPED, program_id, dropped.moved_tokens)
        return dropped.moved_tokens

    def _keep(self, program_id: str, nodes: list[Node], until: float, now: float) -> None:
        """Count a keep decision: the distinct live nodes it retains, joined with the
        program's earlier decision while that one still stands (a later tool wait of the same
        context keeps the same nodes longer: counted once)."""
        self._keep_number += 1
        standing = self._kept.pop(program_id, None)
        if standing is not None:
            self._retained_tokens -= standing.tokens
            if standing.until > now:
                mine = {id(n) for n in nodes}
                nodes = nodes + [n for n in standing.nodes if id(n) not in mine]
                until = max(until, standing.until)
        tokens = sum(n.tokens for n in nodes if not n.dead)
        self._kept[program_id] = KeepDecision(self._keep_number, tokens, nodes, until)
        heapq.heappush(self._retained, (until, self._keep_number, program_id))
        self._retained_tokens += tokens

    def release_kept(self, program_id: str, now: float) -> int:
        """End the program's standing keep decision, and the retention of what it offloaded,
        now (its next call arrived, or it ended), as SGLang's adapter does
        (``sglang/retention.py``); returns the tokens released."""
        released = 0
        offloaded = self._offloaded.pop(program_id, None)
        if offloaded is not None:
            released = self.index.end_retention(offloaded, now)
        standing = self._kept.pop(program_id, None)
        if standing is None:
            return released
        self._retained_tokens -= standing.tokens
        return released + self.index.end_retention(standing.nodes, now)

    def retained_tokens(self, now: float) -> int:
        """Tokens softly retained for programs in tool wait (an estimate: retention that
        ended early by an eviction still counts until its deadline or the program's return)."""
        retained, kept = self._retained, self._kept
        while retained and retained[0][0] <= now:
            _, number, program_id = heapq.heappop(retained)
            standing = kept.get(program_id)
            if standing is not None and standing.number == number:
                del kept[program_id]
                self._retained_tokens -= standing.tokens
        return self._retained_tokens

    def _copied_on_eviction(self, evicted: list[KVMove]) -> int:
        """Tokens an eviction must copy to DRAM over the host link before its room is free.

        Write-back: what it demoted from HBM (SGLang backs a victim up synchronously when
        evicting it, ``backup_node_for_write_back`` then ``writing_check(write_back=True)``;
        drops, and demotions between slower tiers, cross no host link). Write-through: none;
        each node was copied when inserted, on SGLang's write stream, device to host, while
        reloads go host to device on their own stream. Those copies are not timed: the
        link's device-to-host direction carries them at a small share of its bandwidth
        (an 8B model on an H200 computes at most ~30K tokens/s of 128 KiB each: ~4 GB/s of 55)."""
        if self.write_through:
            return 0
        return sum(m.tokens for m in evicted if m.src is Tier.HBM and m.dst is not None)

    def _write_back(self, now: float, tokens: int) -> float:
        """Copy ``tokens`` an eviction demoted to DRAM, blocking the engine until they are
        there (:attr:`blocked_until`); when the copy ends."""
        done = self._transfer(now, tokens)
        self.blocked_until = max(self.blocked_until, done)
        return done

    def _transfer(self, now: float, tokens: int) -> float:
        """Queue a copy of ``tokens`` on the host link (one copy at a time); when it ends."""
        start = max(now, self._link_free_at)
        self._link_free_at = start + self.cost.transfer_seconds(tokens)
        return self._link_free_at

    # -- events --------------------------------------------------------------------------------
    def _emit(self, now: float, kind: EventKind, program_id: str, tokens: int) -> None:
        """Record a ``kv.*`` event of ``tokens`` for ``program_id``."""
        self.sink.emit(
            Event(
                now,
                kind,
                program_id,
                data={"tokens": tokens, "bytes": tokens * self.cost.kv_bytes_per_token},
            )
        )

    def _emit_evictions(self, evicted: list[KVMove], now: float) -> None:
        """Record what ``evicted`` (an eviction's moves) demoted or dropped, if anything: each
        node once (one demoted to DRAM can be dropped from there by the same eviction, to
        make DRAM room for the next one)."""
        if evicted:
            tokens = sum({id(move.node): move.tokens for move in evicted}.values())
            self._emit(now, EventKind.KV_EVICTED, "", tokens)


def _scoped(tenant: str, block: Block) -> Hashable:
    """``block``'s key where it was computed, as the prefix index scopes it: a public block
    is everyone's, any other its tenant's (a platform prefix each tenant holds a copy of has
    one key for all: its second tenant's first copy is no recompute of the first's)."""
    return block.key if block.public else (tenant, block.key)
