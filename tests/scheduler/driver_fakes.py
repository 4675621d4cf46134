"""Stand-ins the program driver's tests share."""

from __future__ import annotations

from agentconsole.scheduler.actions import KvAdvice, ToolWaitFacts
from agentconsole.scheduler.runtime import CacheAction, MemoryView


class LinearCost:
    """A runtime's costs, linear in tokens (the driver's ``CallCost``)."""

    def call_seconds(self, uncached_prompt_tokens: int, output_tokens: float) -> float:
        return 0.001 * uncached_prompt_tokens + 0.01 * output_tokens

    def prefill_seconds(self, new_tokens: int, cached_tokens: int = 0) -> float:
        return 0.001 * new_tokens

    def reload_seconds(self, tokens: int) -> float:
        return 0.0001 * tokens


class KeepAdvisor:
    """A tool-wait advisor that keeps every context (the driver's ``KvAdvisor``)."""

    def advise(self, facts: ToolWaitFacts, memory: MemoryView, now: float) -> KvAdvice:
        return KvAdvice(CacheAction.KEEP, 1.0, 1.0, {})
