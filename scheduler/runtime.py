"""The runtime protocol: what the server needs from an LLM engine.

Two implementations live in ``agentconsole.server.runtime``: the SGLang adapter (the real engine,
with the program-aware policy running inside SGLang's scheduler process) and the simulated
engine (a discrete-event model of an SGLang-like engine, in wall-clock time under ``serve``).
The protocol is defined here, beside the controller that feeds it, so the scheduler package
stays free of server imports.

Identity: every call is submitted with its :class:`CallTicket`; ``ticket.call_id``
(``program/node/attempt``) is the engine's request id, so abort and reprioritise go by exact id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from agentconsole.scheduler.ticket import CallTicket


class CacheAction(StrEnum):
    """What to do with a program's KV while it waits on a tool (the tool-wait decision)."""

    KEEP = "keep"  # stay on the GPU, softly retained for ``retain_s``
    OFFLOAD = "offload"  # move to host memory now, reload on return
    DROP = "drop"  # free it; recompute on return


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    ticket: CallTicket
    prompt: str  # rendered prompt (chat template already applied)
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    #: cache namespace derived from the *authenticated* tenant; never from the client
    cache_namespace: str = ""
    #: leading characters of ``prompt`` the platform marked public (shareable across tenants)
    public_prefix_chars: int = 0
    #: simulated runtimes only: generate exactly this many tokens when set
    forced_output_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class TokenDelta:
    text: str
    tokens: int


@dataclass(frozen=True, slots=True)
class GenerationResult:
    finish_reason: str  # stop | length | abort
    text: str
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    queue_s: float = 0.0
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    service_s: float = 0.0
    restore_s: float = 0.0
    retractions: int = 0


class GenerationStream(Protocol):
    """Tokens as they are generated, then the final result."""

    def __aiter__(self) -> AsyncIterator[TokenDelta]: ...

    async def result(self) -> GenerationResult:
        """Wait for the call to end (finished or aborted) and return its accounting."""
        ...


@dataclass(frozen=True, slots=True)
class QueuedCall:
    call_id: str
    program_id: str
    tenant: str
    key: float
    waited_s: float


@dataclass(frozen=True, slots=True)
class RunningCall:
    call_id: str
    program_id: str
    tenant: str
    context_tokens: int
    generated_tokens: int
    running_s: float


@dataclass(frozen=True, slots=True)
class TierUsage:
    used_tokens: int
    capacity_tokens: int
    used_bytes: int


@dataclass(frozen=True, slots=True)
class RuntimeSnapshot:
    runtime: str
    policy: str
    queued: tuple[QueuedCall, ...] = ()
    running: tuple[RunningCall, ...] = ()
    tiers: dict[str, TierUsage] = field(default_factory=dict)
    #: program id -> tier name -> tokens of that program's context resident there
    placement: dict[str, dict[str, int]] = field(default_factory=dict)
    prefix_hit_tokens: int = 0
    paused: bool = False


class Runtime(Protocol):
    """An LLM engine the server can drive. All methods are safe to call concurrently."""

    name: str

    async def start(self) -> None:
        """Bring the engine up; returns when it answers requests."""

    async def stop(self) -> None:
        """Shut down; pending calls end with finish_reason ``abort``."""

    def submit(self, request: GenerationRequest) -> GenerationStream:
        """Queue a call; the engine orders it with the active policy and ``request.ticket``."""
        ...

    async def abort(self, call_id: str) -> bool:
        """Abort a queued or running call by exact id. Returns True once the engine confirmed
        the call is gone (no token is produced after that); False if it was unknown."""
        ...

    async def reprioritise(self, call_id: str, ticket: CallTicket) -> bool:
        """Re-rank a queued (or running, where preemption allows) call under a new ticket."""
        ...

    async def preempt(self, call_id: str) -> bool:
        """Take a running call off the GPU now; it is requeued and resumes later."""
        ...

    async def cache_hint(self, program_id: str, action: CacheAction, retain_s: float) -> None:
        """Apply a tool-wait decision to the program's resident context."""

    def set_policy(self, name: str) -> None:
        """Switch the ordering policy for waiting calls (by registry name)."""

    async def pause(self) -> None:
        """Stop admitting new calls (drain); running calls continue."""

    async def resume(self) -> None: ...

    async def healthy(self) -> bool:
        """A real liveness probe (the engine answered recently or answers now)."""
        ...

    def snapshot(self) -> RuntimeSnapshot:
        """Queue, running batch and KV use per tier, without blocking the engine."""
        ...
