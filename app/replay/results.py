"""What a replay reports: options, one outcome per program, and the summary."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from agentconsole.scheduler.metrics import percentile

ToolMode = Literal["gateway", "agent"]
ProgramState = Literal["finished", "cancelled", "failed", "skipped"]


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How programs are played.

    ``speed`` divides the trace's arrival offsets, tool latencies and cancel times (LLM calls
    run at the server's own pace, so deadlines stay as recorded). ``tools``: ``gateway``
    calls the builtin ``sleep`` tools the replayer registers (one call per recorded attempt,
    so retries and failures go through the gateway's idempotency keys); ``agent`` runs the
    tools in the replayer and reports them with ``tool-calls/start`` and ``finish``.
    ``token_scale`` scales prompt sizes (small models need about 0.02 for the seed workloads'
    80K-token contexts); ``max_output_tokens`` caps
    ``max_tokens``.
    """

    speed: float = 1.0
    tools: ToolMode = "gateway"
    token_scale: float = 1.0
    max_output_tokens: int | None = None
    model: str = "auto"  # the server's choice (any name on a server of one model)
    request_timeout_s: float = 600.0
    id_prefix: str = ""
    labels: tuple[tuple[str, str], ...] = (("source", "replay"),)

    def __post_init__(self) -> None:
        if not (self.speed > 0 and math.isfinite(self.speed)):
            raise ValueError("speed must be a positive number")
        if not self.token_scale >= 0:
            raise ValueError("token_scale must be >= 0")


@dataclass(frozen=True, slots=True)
class ProgramOutcome:
    """How one program went; ``e2e_s`` is wall time from its arrival to its end."""

    program_id: str
    tenant: str
    state: ProgramState
    e2e_s: float
    llm_calls: int = 0
    tool_calls: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """Every program's outcome and the run's wall time."""

    outcomes: tuple[ProgramOutcome, ...]
    wall_s: float

    def count(self, state: ProgramState) -> int:
        """Programs that ended in ``state``."""
        return sum(1 for o in self.outcomes if o.state == state)

    def e2e(self, q: float) -> float | None:
        """The ``q``-th percentile (0..100) of the finished programs' E2E; None when none
        finished (the summary then prints "n/a" rather than a number)."""
        finished = [o.e2e_s for o in self.outcomes if o.state == "finished"]
        return percentile(finished, q) if finished else None

    def render(self) -> str:
        """The summary lines the CLI prints."""
        states = Counter(o.state for o in self.outcomes)
        p50, p95 = self.e2e(50), self.e2e(95)
        lines = [
            f"programs: {len(self.outcomes)}  finished: {states['finished']}"
            f"  cancelled: {states['cancelled']}  failed: {states['failed']}"
            f"  skipped: {states['skipped']}",
            "E2E (finished): "
            + ("n/a" if p50 is None or p95 is None else f"p50 {p50:.2f} s  p95 {p95:.2f} s"),
            f"LLM calls: {sum(o.llm_calls for o in self.outcomes)}"
            f"  tool calls: {sum(o.tool_calls for o in self.outcomes)}"
            f"  wall: {self.wall_s:.1f} s",
        ]
        errors = [o for o in self.outcomes if o.error]
        lines += [f"  {o.program_id}: {o.error}" for o in errors[:5]]
        return "\n".join(lines)
