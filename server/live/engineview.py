"""What ``serve``'s runtime shows the program driver: its memory, a program's context, the
cost of a restore. The serve-side twin of ``server/runtime/sim/carrier.py``: the driver reads
the same ``MemoryView`` and ``ProgramContext`` from either.
"""

from __future__ import annotations

from agentconsole.scheduler.runtime import MemoryView, ProgramContext, Runtime
from agentconsole.server.live.servicemodel import OnlineServiceModel


class RuntimeView:
    """The driver's ``EngineView`` over one live runtime (times are the runtime's now)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def memory(self, program_id: str, now: float) -> MemoryView:
        """The memory of the engine the program runs on (its data-parallel rank, its latest
        model: the replica ``bench`` shows the driver), the whole runtime's while it ran
        nowhere yet."""
        del now  # the runtime's view is of its own now
        return self.runtime.memory(program_id)

    def context(self, program_id: str, now: float) -> ProgramContext | None:
        del now
        return self.runtime.context_of(program_id)


class LiveCost:
    """The driver's ``CostView`` in serve: prefill from the learned service model, reloads
    over the host link the runtime reports."""

    def __init__(self, model: OnlineServiceModel, runtime: Runtime) -> None:
        self.model = model
        self.runtime = runtime

    def prefill_seconds(self, new_tokens: int, cached_tokens: int = 0) -> float:
        del cached_tokens  # the learned model is linear in the new tokens
        return self.model.prefill_seconds_per_token() * max(new_tokens, 0)

    def reload_seconds(self, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        memory = self.runtime.memory()
        return tokens * memory.kv_bytes_per_token / memory.host_link_bytes_per_s
