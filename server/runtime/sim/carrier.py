"""What the simulated engines show the program driver, and what the simulator's tool-wait
decisions act on: one engine's memory, one program's last context.

``scheduler.driver.ProgramDriver`` reads engines only through :class:`SimEngines`
(its ``EngineView``) and a cost view (:class:`CostServiceModel`), so the simulator and
``serve`` feed it the same numbers for the same state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentconsole.kvtiers.node import Node
from agentconsole.kvtiers.tiers import Tier
from agentconsole.scheduler.runtime import MemoryView, ProgramContext
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.engine import SimEngine
from agentconsole.server.runtime.sim.programs import ProgramRun


class CostServiceModel:
    """The controller's and the driver's view of the cost model: one call running alone, a
    prefill, a reload over the host link."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self._per_decode = cost.decode_step_seconds(1, 8192)

    def call_seconds(self, uncached_prompt_tokens: int, output_tokens: float) -> float:
        return self.cost.prefill_seconds(uncached_prompt_tokens) + output_tokens * self._per_decode

    def prefill_seconds(self, new_tokens: int, cached_tokens: int = 0) -> float:
        return self.cost.prefill_seconds(new_tokens, cached_tokens)

    def reload_seconds(self, tokens: int) -> float:
        return self.cost.transfer_seconds(tokens) if tokens > 0 else 0.0


def memory_view(engine: SimEngine, now: float) -> MemoryView:
    """``engine``'s KV memory and queue at ``now`` (``MemoryView``'s definitions)."""
    index, cost = engine.index, engine.cost
    return MemoryView(
        hbm_capacity_tokens=index.capacity(Tier.HBM),
        free_tokens=index.free(Tier.HBM),
        evictable_tokens=index.evictable(Tier.HBM),
        protected_tokens=engine.protected_tokens(now),
        queued_tokens=engine.queued_demand,
        queued_calls=len(engine.queue),
        running_calls=len(engine.running),
        batch_slots=engine.config.max_running_requests,
        dram_capacity_tokens=index.capacity(Tier.DRAM),
        kv_bytes_per_token=cost.kv_bytes_per_token,
        host_link_bytes_per_s=engine.tiers.dram.bandwidth_bytes_per_s,
    )


def private_nodes(run: ProgramRun) -> list[Node]:
    """The still-cached nodes of the program's last context that belong to it alone (trace
    segment keys of its own nodes start with its id)."""
    mine = f"{run.trace.id}/"
    return [n for n in run.last_path if not n.dead and _owned(n, mine)]


def holds_private(run: ProgramRun) -> bool:
    """Whether any node of :func:`private_nodes` is left, found from the context's end (where a
    program's own segments are) and stopping at the first: routing asks it of every mapped
    program when placements tie, so it must not build the list."""
    mine = f"{run.trace.id}/"
    return any(not n.dead and _owned(n, mine) for n in reversed(run.last_path))


def _owned(node: Node, prefix: str) -> bool:
    """``node`` holds a segment of the program whose keys start with ``prefix``."""
    return isinstance(node.key, str) and node.key.startswith(prefix)


class SimEngines:
    """The driver's ``EngineView`` over the replicas: a program is looked at on the engine
    its last call ran on."""

    def __init__(self, engines: Sequence[SimEngine], runs: Mapping[str, ProgramRun]) -> None:
        self.engines = engines
        self.runs = runs

    def memory(self, program_id: str, now: float) -> MemoryView:
        e = self.runs[program_id].engine
        return memory_view(self.engines[e or 0], now)

    def context(self, program_id: str, now: float) -> ProgramContext | None:
        run = self.runs[program_id]
        # only what is still cached: the answer reaches the agent a little after the engine
        # finished the call (call_overhead_s), and eviction may have run in between
        mine = f"{run.trace.id}/"
        private = cached = 0
        for n in run.last_path:
            if not n.dead:
                cached += n.tokens
                if _owned(n, mine):
                    private += n.tokens
        if not private:
            return None
        return ProgramContext(private, cached - private)
