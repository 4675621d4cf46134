"""Which replica runs a call: a placement rule of ``kvtiers.router`` over the engines.

The rule is chosen by name (``affinity``, the default, or ``round-robin``) and is the same
object SGLang's ``RankRouter`` places programs with, so ``bench --replicas N`` keeps to what
``serve --dp N`` does: a program's first call is scored on every replica (cached tokens against
prefill and decode load), its later calls stay on that replica. What the simulator supplies is
its own exact view: each replica's prefix index and load, and whether a replica still holds a
program's context (some node of its last context that is its own is still cached, on any tier).
A tool-wait ``recompute`` decision drops those nodes, so the program is placed again at its
next call, as ``RankRouter.release`` does live; so is a program whose context was evicted. A
program that ended is forgotten at once (:meth:`ReplicaRouter.forget`, the driver's
``ProgramEnded``), as ``serve --dp`` forgets its rank. What a new program's first prompt is
credited with at the door is what the replicas the rule could place it on all hold
(:meth:`ReplicaRouter.held_where_placed`, ``runtime/prefixcredit.py``), as ``serve --dp``
credits it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agentconsole.kvtiers.node import Block, Node
from agentconsole.kvtiers.results import Match
from agentconsole.kvtiers.router import RouteWeights, WorkerState, get_router
from agentconsole.kvtiers.tiers import TierModel
from agentconsole.server.runtime.prefixcredit import credited_prefix, likely_ranks
from agentconsole.server.runtime.sim.carrier import holds_private
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.programs import ProgramRun


class _Index(Protocol):
    def peek(self, tenant: str, blocks: list[Block]) -> Match: ...


class Replica(Protocol):
    """What routing reads of an engine (``SimEngine``)."""

    @property
    def name(self) -> str: ...
    @property
    def index(self) -> _Index: ...
    @property
    def tiers(self) -> TierModel: ...
    @property
    def prefill_load(self) -> float: ...
    @property
    def decode_load(self) -> int: ...


class ReplicaRouter:
    """Routes calls over ``engines`` with the placement rule named ``routing``."""

    def __init__(
        self, engines: Sequence[Replica], cost: CostModel, routing: str = "affinity"
    ) -> None:
        self.engines = engines
        self.weights = RouteWeights(
            recompute_seconds_per_token=cost.prefill_seconds(8192) / 8192,
            tiers=engines[0].tiers,
        )
        self.rule = get_router(routing, len(engines), self.weights)
        self._runs: dict[str, ProgramRun] = {}  # programs routed, for ``_holds``
        #: each program's last context when it was last placed: a context from before a
        #: placement says nothing of the new replica (live: no placement sweep since then)
        self._placed_with: dict[str, list[Node]] = {}
        self._routed = 0

    def route(self, run: ProgramRun, blocks: list[Block]) -> tuple[int, Match]:
        """The replica to run a call of ``run`` with prompt ``blocks`` on, and its match there.
        Changes nothing in the engines (matches are peeks)."""
        engines = self.engines
        tenant = run.trace.tenant
        if len(engines) == 1:
            return 0, engines[0].index.peek(tenant, blocks)
        pid = run.trace.id
        self._runs[pid] = run
        peeked: dict[int, Match] = {}

        def workers(ranks: Sequence[int]) -> list[WorkerState]:
            return self._states(ranks, tenant, blocks, peeked)

        prompt = sum(b.tokens for b in blocks)
        e = self.rule.route(pid, prompt, self._holds, workers)
        found = peeked.get(e)
        if found is None:  # stayed where its context is: one peek
            return e, engines[e].index.peek(tenant, blocks)
        self._placed_with[pid] = run.last_path
        self._routed += 1
        if self._routed % 4096 == 0:
            self._prune()
        return e, found

    def preview(self, run: ProgramRun, blocks: list[Block]) -> tuple[int, Match]:
        """The replica :meth:`route` would run the call on now, and its match there; changes
        nothing (the rule records no placement: a model the selector may not choose)."""
        engines = self.engines
        tenant = run.trace.tenant
        if len(engines) == 1:
            return 0, engines[0].index.peek(tenant, blocks)
        peeked: dict[int, Match] = {}

        def workers(ranks: Sequence[int]) -> list[WorkerState]:
            return self._states(ranks, tenant, blocks, peeked)

        prompt = sum(b.tokens for b in blocks)
        e = self.rule.preview(run.trace.id, prompt, self._holds, workers)
        found = peeked.get(e)
        return e, found if found is not None else engines[e].index.peek(tenant, blocks)

    def held_where_placed(self, program_id: str, tenant: str, blocks: list[Block]) -> int:
        """The tokens of a prompt ``blocks`` the program's next call would find cached (any
        tier) where it may be placed now: the least over the replicas the rule could choose
        (``runtime/prefixcredit.py``, the rule ``serve --dp`` credits a new program by).
        Changes nothing."""
        engines = self.engines
        peeked: dict[int, Match] = {}

        def held_on(k: int) -> int:
            found = peeked.get(k)
            if found is None:
                found = peeked[k] = engines[k].index.peek(tenant, blocks)
            return found.hit_tokens

        if len(engines) == 1:
            return held_on(0)
        rank = self.rule.rank_of(program_id)
        pinned = rank if rank is not None and self._holds(program_id, rank) else None

        def workers(ranks: Sequence[int]) -> list[WorkerState]:
            return self._states(ranks, tenant, blocks, peeked)

        prompt = sum(b.tokens for b in blocks)
        scored = workers if self.rule.places_by_score else None
        ranks = likely_ranks(range(len(engines)), prompt, self.weights, scored, pinned)
        return credited_prefix(ranks, held_on)

    def _states(
        self, ranks: Sequence[int], tenant: str, blocks: list[Block], peeked: dict[int, Match]
    ) -> list[WorkerState]:
        """The replicas ``ranks`` as the rule scores them for prompt ``blocks``: the prompt's
        hits there by tier and the replica's load; each match is kept in ``peeked``."""
        out = []
        for k in ranks:
            engine = self.engines[k]
            m = peeked[k] = engine.index.peek(tenant, blocks)
            out.append(
                WorkerState(
                    engine.name, m.tokens_by_tier, int(engine.prefill_load), engine.decode_load
                )
            )
        return out

    def forget(self, program_id: str) -> None:
        """The program ended: its replica no longer counts it (``ProgramEnded``; live,
        ``Runtime.program_ended``)."""
        self.rule.release(program_id)
        self._runs.pop(program_id, None)
        self._placed_with.pop(program_id, None)

    def _holds(self, program_id: str, rank: int) -> bool:
        """Whether ``rank`` still holds some of the program's own context (its KV there was
        neither released nor evicted); true before its first call finished."""
        run = self._runs.get(program_id)
        if run is None:
            return False
        path = run.last_path
        return not path or path is self._placed_with.get(program_id) or holds_private(run)

    def _prune(self) -> None:
        """Forget the runs of programs the rule no longer maps (ended, or placed again)."""
        rank_of = self.rule.rank_of
        self._runs = {p: r for p, r in self._runs.items() if rank_of(p) is not None}
        self._placed_with = {p: n for p, n in self._placed_with.items() if p in self._runs}
