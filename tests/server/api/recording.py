"""A simulated runtime that keeps every request it is sent, for tests of what the OpenAI edge
passes on to the runtime (and what it leaves out)."""

from __future__ import annotations

from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.live import SimLiveRuntime
from agentconsole.server.runtime.sim.live_stream import SimStream


class RecordingRuntime(SimLiveRuntime):
    """The simulated runtime (fast: ``time_scale`` 0.05), recording every request in
    ``sent``."""

    def __init__(self) -> None:
        super().__init__(preset("H200-141GB", "llama-3.1-8b", 1), time_scale=0.05)
        self.sent: list[GenerationRequest] = []

    def submit(self, request: GenerationRequest) -> SimStream:
        self.sent.append(request)
        return super().submit(request)
