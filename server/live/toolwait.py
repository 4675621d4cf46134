"""The tool-wait KV decision in the live server.

When a program starts a tool and has no LLM call in flight, its KV would sit idle for the
tool's latency. :class:`ToolWaitAdvisor` builds the :class:`ToolWait` inputs from what the live
server knows (the tool's learned latency distribution, the context of the program's last call,
the runtime's tier sizes and queue), asks the active kvtiers policy, records a ``kv.decision``
event and hands the action to the runtime as a cache hint. Retained contexts are remembered
for ``GET /v1/kv``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from agentconsole.kvtiers.tiers import TierModel
from agentconsole.kvtiers.toolwait import (
    Action,
    Decision,
    ToolWait,
    ToolWaitPolicy,
    get_tool_wait_policy,
    pressure_from_queue,
)
from agentconsole.scheduler.events import Event, EventKind, EventSink
from agentconsole.scheduler.latency import LatencyDistribution
from agentconsole.scheduler.program import Node, NodeKind, NodeState, Program
from agentconsole.scheduler.runtime import CacheAction, Runtime, RuntimeSnapshot
from agentconsole.server.live.servicemodel import OnlineServiceModel

PCIE_BYTES_PER_S = 25e9  # assumed host-link bandwidth when the runtime does not say
_ACTIONS = {
    Action.KEEP: CacheAction.KEEP,
    Action.OFFLOAD: CacheAction.OFFLOAD,
    Action.RECOMPUTE: CacheAction.DROP,
}


@dataclass(frozen=True, slots=True)
class Retained:
    """A program's context kept (or offloaded) for a tool wait, for ``GET /v1/kv``."""

    program_id: str
    tenant: str
    tokens: int
    tier: str
    until: float


def tier_model(snapshot: RuntimeSnapshot) -> TierModel:
    """The runtime's tiers as a :class:`TierModel` (bytes per token from current use)."""
    hbm = snapshot.tiers.get("hbm")
    dram = snapshot.tiers.get("dram")
    per_token = 1.0
    if hbm is not None and hbm.used_tokens > 0:
        per_token = max(hbm.used_bytes / hbm.used_tokens, 1.0)
    return TierModel.build(
        kv_bytes_per_token=per_token,
        hbm_tokens=hbm.capacity_tokens if hbm else 0,
        dram_tokens=dram.capacity_tokens if dram else 0,
        dram_bandwidth=PCIE_BYTES_PER_S,
    )


class ToolWaitAdvisor:
    """Decides and applies the KV action for programs entering a tool wait."""

    def __init__(
        self,
        policy: str,
        runtime: Runtime,
        sink: EventSink,
        model: OnlineServiceModel,
        distribution: Callable[[str, str], LatencyDistribution],
    ) -> None:
        self.policy: ToolWaitPolicy = get_tool_wait_policy(policy)
        self.policy_name = policy
        self.runtime = runtime
        self.sink = sink
        self.model = model
        self.distribution = distribution
        self.retained: dict[str, Retained] = {}

    def set_policy(self, name: str) -> None:
        """Switch the tool-wait policy (``KeyError`` for an unknown name)."""
        self.policy = get_tool_wait_policy(name)
        self.policy_name = name

    def released(self, program_id: str) -> None:
        """The program's wait is over (its tool finished, or it ended)."""
        self.retained.pop(program_id, None)

    async def tool_wait(self, program: Program, tool: Node, demand: float) -> Decision | None:
        """Decide for ``program``, now waiting on ``tool`` with no LLM call in flight, and
        apply the decision; ``demand`` is the prompt tokens of calls waiting in the runtime.
        None (nothing done) when the program has no finished LLM call yet."""
        last = next(
            (
                n
                for n in reversed(program.nodes.values())
                if n.kind is NodeKind.LLM and n.state is NodeState.DONE
            ),
            None,
        )
        if last is None or tool.tool is None:
            return None
        private = last.prompt_tokens - last.cached_tokens + last.output_tokens
        if private <= 0:
            return None
        spec = tool.tool
        snapshot = self.runtime.snapshot()
        hbm = snapshot.tiers.get("hbm")
        free = (hbm.capacity_tokens - hbm.used_tokens) if hbm else 0
        wait = ToolWait(
            private_tokens=private,
            shared_tokens=last.cached_tokens,
            latency=self.distribution(spec.name, spec.kind.value),
            tiers=tier_model(snapshot),
            recompute_seconds_per_token=self.model.prefill_seconds_per_token(),
            pressure=pressure_from_queue(demand, free),
            gpu_pressure=float(len(snapshot.running) + len(snapshot.queued)),
        )
        decision = self.policy.decide(wait)
        now = time.time()
        self.sink.emit(
            Event(
                now,
                EventKind.KV_DECISION,
                program.program_id,
                tool.node_id,
                tool.attempt,
                program.tenant,
                {
                    "action": decision.action.value,
                    "retain_s": decision.retain_seconds,
                    "private_tokens": private,
                    "pressure": wait.pressure,
                    "tool": spec.name,
                    **{f"cost_{k}": v for k, v in decision.expected_costs.items()},
                },
            )
        )
        action = _ACTIONS[decision.action]
        await self.runtime.cache_hint(program.program_id, action, decision.retain_seconds)
        if action is not CacheAction.DROP:
            tier = "hbm" if action is CacheAction.KEEP else "dram"
            until = now + decision.retain_seconds
            self.retained[program.program_id] = Retained(
                program.program_id, program.tenant, private, tier, until
            )
        return decision
