"""Which replica runs a call: the KV-aware router score (``kvtiers.router``) over the engines.

A program's first call is scored on every replica; later calls only on the replica holding its
context and the least loaded one (where else could it be cheaper?), so routing stays O(1) in
the number of replicas for a program in flight.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentconsole.kvtiers.node import Block
from agentconsole.kvtiers.results import Match
from agentconsole.kvtiers.router import RouteWeights, WorkerState, choose_worker
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.engine import SimEngine
from agentconsole.server.runtime.sim.programs import ProgramRun


class ReplicaRouter:
    """Routes calls over ``engines`` (Dynamo-style score: cached tokens against load)."""

    def __init__(self, engines: Sequence[SimEngine], cost: CostModel) -> None:
        self.engines = engines
        self.weights = RouteWeights(
            recompute_seconds_per_token=cost.prefill_seconds(8192) / 8192,
            tiers=engines[0].tiers,
        )

    def route(self, run: ProgramRun, blocks: list[Block]) -> tuple[int, Match]:
        """The replica to run a call of ``run`` with prompt ``blocks`` on, and its match there.
        Changes nothing (matches are peeks)."""
        engines = self.engines
        tenant = run.trace.tenant
        if len(engines) == 1:
            return 0, engines[0].index.peek(tenant, blocks)
        if run.engine is None:
            candidates = list(range(len(engines)))
        else:
            loads = [engine.load for engine in engines]
            idle = loads.index(min(loads))  # the first least loaded, as min() picks
            candidates = [run.engine] if idle == run.engine else [run.engine, idle]
        matches = [engines[k].index.peek(tenant, blocks) for k in candidates]
        prompt = matches[0].requested_tokens
        workers = [
            WorkerState(
                engines[k].name,
                m.tokens_by_tier,
                int(engines[k].prefill_load),
                engines[k].decode_load,
            )
            for k, m in zip(candidates, matches, strict=True)
        ]
        best = choose_worker(prompt, workers, self.weights)
        return candidates[best], matches[best]
