"""Tool-wait KV decisions in virtual time: what happens to a program's KV while it waits.

Called when a program-aware policy sees a program whose only pending work is tools. The
decision itself belongs to the registered ``ToolWaitPolicy``; this module gathers what it
decides from (the slowest pending tool's *estimated* latency, memory pressure averaged over
the hold) and applies the result to the engine's prefix index.
"""

from __future__ import annotations

import math

from agentconsole.kvtiers.node import Node
from agentconsole.kvtiers.tiers import Tier
from agentconsole.kvtiers.toolwait import Decision, ToolWait, ToolWaitPolicy, pressure_from_queue
from agentconsole.sample_traces.format import ToolNode
from agentconsole.scheduler.controller import ProgramController
from agentconsole.scheduler.events import Event, EventKind, EventSink
from agentconsole.scheduler.latency import LatencyDistribution
from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.engine import SimEngine
from agentconsole.server.runtime.sim.programs import ProgramRun

_KV_ACTION = {
    "keep": CacheAction.KEEP,
    "offload": CacheAction.OFFLOAD,
    "recompute": CacheAction.DROP,
}
PRESSURE_AVERAGE_S = 30.0  # time constant of the pressure average: a hold lasts minutes


class SimToolWait:
    """Decides and applies tool-wait KV actions; keeps only a moving average of pressure."""

    def __init__(
        self,
        policy: ToolWaitPolicy,
        cost: CostModel,
        controller: ProgramController,
        sink: EventSink,
    ) -> None:
        self.policy = policy
        self.cost = cost
        self.controller = controller
        self.sink = sink
        self._pressure_avg = (0.0, 0.0)  # (as of, moving average of tool-wait pressure)

    def hold(
        self,
        run: ProgramRun,
        engine: SimEngine,
        path: list[Node],
        now: float,
        door_tokens: float = 0.0,
    ) -> Decision | None:
        """``run`` now waits on tools only: decide what happens to its private KV (the nodes of
        ``path``, its last call's context, that belong to it alone), apply it and return the
        decision (None: nothing of it was cached). ``door_tokens``: what programs waiting to
        start will claim, demand as real as the engine's queue."""
        pid = run.trace.id
        mine = f"{pid}/"  # trace segment keys of the program's own nodes start so
        # only what is still cached: the call's answer reaches the agent a little after the
        # engine finished it (call_overhead_s), and eviction may have run in between
        path = [n for n in path if not n.dead]
        private = [n for n in path if isinstance(n.key, str) and n.key.startswith(mine)]
        private_tokens = sum(n.tokens for n in private)
        if not private_tokens:
            return None
        index = engine.index
        # what admission may take: free plus evictable, but not what the gate spares
        reclaimable = max(index.evictable(Tier.HBM) - engine.protected_tokens(now), 0)
        free = index.free(Tier.HBM) + reclaimable
        demand, queued = engine.queued_demand + door_tokens, len(engine.queue)
        wait = ToolWait(
            private_tokens=private_tokens,
            shared_tokens=sum(n.tokens for n in path) - private_tokens,
            latency=self._slowest_tool(run),
            tiers=engine.tiers,
            recompute_seconds_per_token=self.cost.prefill_seconds(private_tokens) / private_tokens,
            pressure=self._pressure(pressure_from_queue(demand, free), now),
            call_tokens=max(engine.queued_demand / queued, 1.0) if queued else 8192.0,
            gpu_pressure=float(len(engine.running) + len(engine.queue)),
        )
        decision = self.policy.decide(wait)
        self.sink.emit(
            Event(
                now,
                EventKind.KV_DECISION,
                pid,
                tenant=run.trace.tenant,
                data={
                    "action": decision.action.value,
                    "retain_s": decision.retain_seconds,
                    "private_tokens": private_tokens,
                    "pressure": wait.pressure,
                    **{f"cost_{k}": v for k, v in decision.expected_costs.items()},
                },
            )
        )
        action = _KV_ACTION[decision.action.value]
        engine.apply_cache_action(pid, private, action, decision.retain_seconds, now)
        return decision

    def _pressure(self, now_pressure: float, now: float) -> float:
        """Memory pressure for a hold that lasts seconds to minutes: the larger of the present
        pressure and its moving average over the last ~30 s (an empty queue at decision time
        says little about the next minute)."""
        last_t, last = self._pressure_avg
        weight = math.exp(-(now - last_t) / PRESSURE_AVERAGE_S) if now > last_t else 1.0
        average = weight * last + (1.0 - weight) * now_pressure
        self._pressure_avg = (now, average)
        return max(now_pressure, average)

    def _slowest_tool(self, run: ProgramRun) -> LatencyDistribution:
        """The pending tool with the longest estimated mean latency (what the hold waits on)."""
        best: LatencyDistribution | None = None
        for i in run.tools:
            node = run.trace.nodes[i]
            assert isinstance(node, ToolNode)
            dist = self.controller.tool_distribution(node.tool, node.tool_kind.value)
            if best is None or dist.mean() > best.mean():
                best = dist
        assert best is not None
        return best
