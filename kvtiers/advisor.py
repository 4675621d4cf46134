"""The tool-wait advisor: turns the driver's facts and one memory view into a decision.

``scheduler.driver.ProgramDriver`` says *when* a program waits on tools and gathers the facts
(private and shared tokens, the slowest pending tool's learned latency, the recompute time);
the registered :class:`~agentconsole.kvtiers.toolwait.ToolWaitPolicy` says *what* to do. This
module is the one place that reads the engine's memory for that decision, the same for every
runtime:

* free HBM is what a new call can have without evicting a kept context: free plus evictable
  minus protected (:attr:`MemoryView.reclaimable_tokens`);
* pressure is the queued demand the free memory cannot take (programs parked at the door
  count: their demand is as real as the engine's queue), as the larger of its present value
  and its moving average over ``PRESSURE_AVERAGE_S`` (a hold lasts seconds to minutes; an
  empty queue at decision time says little about the next minute);
* the size of a call that would want the memory is the mean queued call (8,192 tokens when
  nothing is queued); GPU pressure is the calls running or queued.
"""

from __future__ import annotations

import math
from functools import lru_cache

from agentconsole.kvtiers.tiers import TierModel
from agentconsole.kvtiers.toolwait import ToolWait, ToolWaitPolicy, pressure_from_queue
from agentconsole.scheduler.actions import KvAdvice, ToolWaitFacts
from agentconsole.scheduler.runtime import MemoryView

PRESSURE_AVERAGE_S = 30.0  # time constant of the pressure average
DEFAULT_CALL_TOKENS = 8192.0


@lru_cache(maxsize=16)
def tier_model(
    kv_bytes_per_token: float, hbm_tokens: int, dram_tokens: int, host_link_bytes_per_s: float
) -> TierModel:
    """The tiers a memory view describes (cached: views repeat the same numbers)."""
    return TierModel.build(
        kv_bytes_per_token=max(kv_bytes_per_token, 1e-9),
        hbm_tokens=hbm_tokens,
        dram_tokens=dram_tokens,
        dram_bandwidth=host_link_bytes_per_s,
    )


class ToolWaitAdvisor:
    """Implements ``scheduler.actions.KvAdvisor`` with a registered tool-wait policy. Keeps
    only the moving average of pressure."""

    def __init__(self, policy: ToolWaitPolicy) -> None:
        self.policy = policy
        self._pressure_avg = (0.0, 0.0)  # (as of, moving average)

    def advise(self, facts: ToolWaitFacts, memory: MemoryView, now: float) -> KvAdvice:
        """Decide ``facts`` under ``memory``; updates the pressure average."""
        queued = memory.queued_calls
        present = pressure_from_queue(
            memory.queued_tokens + facts.door_tokens, memory.reclaimable_tokens
        )
        private = facts.private_tokens
        wait = ToolWait(
            private_tokens=private,
            shared_tokens=facts.shared_tokens,
            latency=facts.latency,
            tiers=tier_model(
                memory.kv_bytes_per_token,
                memory.hbm_capacity_tokens,
                memory.dram_capacity_tokens,
                memory.host_link_bytes_per_s,
            ),
            recompute_seconds_per_token=facts.recompute_s / private if private else 0.0,
            pressure=self._pressure(present, now),
            call_tokens=max(memory.queued_tokens / queued, 1.0) if queued else DEFAULT_CALL_TOKENS,
            gpu_pressure=float(memory.running_calls + queued),
        )
        decision = self.policy.decide(wait)
        data = {
            "action": decision.action.value,
            "retain_s": decision.retain_seconds,
            "private_tokens": private,
            "pressure": wait.pressure,
            **{f"cost_{k}": v for k, v in decision.expected_costs.items()},
        }
        return KvAdvice(decision.action, decision.retain_seconds, decision.context_kept_s, data)

    def _pressure(self, present: float, now: float) -> float:
        last_t, last = self._pressure_avg
        weight = math.exp(-(now - last_t) / PRESSURE_AVERAGE_S) if now > last_t else 1.0
        average = weight * last + (1.0 - weight) * present
        self._pressure_avg = (now, average)
        return max(present, average)
