"""Fakes for replaying a trace against the simulated runtime without an engine: segment text
the simulated tokenizer counts exactly, a runtime that keeps every KV hint it was sent, and a
one-tool program (plan, a tool call, an answer)."""

from __future__ import annotations

from typing import Any

from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.live import SimLiveRuntime
from agentconsole.server.runtime.sim.live_text import CHARS_PER_TOKEN

COST = preset("H200-141GB", "llama-3.1-8b", 1)
TOOL, TOOL_KIND = "web_search", "search"
TOOL_LATENCY_S = 0.05


class Letters:
    """Segment text the simulated tokenizer counts as exactly ``tokens``."""

    def text(self, key: str, tokens: int) -> str:
        del key
        return "a" * (tokens * CHARS_PER_TOKEN)


class HintedRuntime(SimLiveRuntime):
    """The simulated engine, keeping every KV hint it was sent."""

    def __init__(self) -> None:
        super().__init__(COST, time_scale=0.0, output_tokens=8)
        self.hints: list[tuple[str, CacheAction, float]] = []

    async def cache_hint(self, program_id: str, action: CacheAction, retain_s: float) -> None:
        self.hints.append((program_id, action, retain_s))
        await super().cache_hint(program_id, action, retain_s)


def plan_tool_answer(pid: str, workload: str) -> dict[str, Any]:
    """Plan, one tool call, answer: one tool wait with the plan's context cached."""
    return {
        "id": pid,
        "tenant": "acme",
        "workload": workload,
        "shape": workload,
        "arrival_s": 0.0,
        "nodes": [
            {"id": "plan", "kind": "llm", "parents": [], "prompt_tokens": 400, "output_tokens": 8},
            {
                "id": "search",
                "kind": "tool",
                "parents": ["plan"],
                "tool": TOOL,
                "tool_kind": TOOL_KIND,
                "timeout_s": 60.0,
                "result_tokens": 40,
                "attempts": [{"latency_s": TOOL_LATENCY_S, "outcome": "ok"}],
            },
            {
                "id": "answer",
                "kind": "llm",
                "parents": ["search"],
                "prompt_tokens": 60,
                "output_tokens": 8,
            },
        ],
    }
