"""Admitting a chat call: program identity, quotas, node, prompt, ticket, submit.

A call names its program (explicitly, created on first sight) or joins an *inferred* one by its
prefix chain (:mod:`identity`). It is refused when the program has stopped (with the reason it
stopped: a quota answers 429/403, otherwise 409) or is over its wall-time or token quota. Its
``priority`` (higher runs sooner) lowers the ticket's policy key by ``PRIORITY_UNIT_S`` per
unit, like an operator boost.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.program import Program
from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.server.live.calls import LiveCall
from agentconsole.server.live.errors import Unavailable
from agentconsole.server.live.identity import chain_hashes
from agentconsole.server.live.prompt import offered_tools, render_chat

if TYPE_CHECKING:
    from agentconsole.server.live.service import ProgramService

PRIORITY_UNIT_S = 1.0
CHARS_PER_TOKEN = 4  # prompt-size estimate for the ticket; the runtime reports the truth


@dataclass(frozen=True, slots=True)
class ChatCall:
    """A chat completion as the service sees it (the HTTP layer validated it)."""

    messages: Sequence[Mapping[str, Any]]
    max_tokens: int
    tools: Sequence[Mapping[str, Any]] | None = None
    tool_choice: object = "auto"
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    program_id: str | None = None
    node_id: str | None = None
    parent_ids: tuple[str, ...] | None = None
    deadline_s: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0
    ignore_eos: bool = False


class CallAdmission:
    """The chat-call entry of :class:`ProgramService`."""

    def __init__(self, service: ProgramService) -> None:
        self.service = service

    async def start(self, tenant: str, chat: ChatCall) -> LiveCall:
        """Admit ``chat`` for ``tenant`` and submit it; raises the service's errors."""
        svc = self.service
        await self._wait_runtime()
        hashes = None
        parents = chat.parent_ids
        if chat.program_id is None:
            hashes = chain_hashes(chat.messages)
            program, parents = self._inferred(tenant, hashes, chat)
        else:
            await svc.check_new_id(tenant, chat.program_id, explicit=False)
            program = svc.program_for_call(tenant, chat.program_id, chat)
        svc.require_running(program)
        await svc.check_quotas(program, time.time())
        render = getattr(svc.runtime, "render_chat", render_chat)
        prompt = render(chat.messages, chat.tools, chat.tool_choice)
        prompt_tokens = max(len(prompt) // CHARS_PER_TOKEN, 1)
        aware = svc.policy.program_aware
        await svc.door.enter(program.program_id, prompt_tokens, program_aware=aware)
        svc.require_running(program)  # it may have been cancelled while at the door
        now = time.time()
        node = svc.nodes.llm_node(program, chat.node_id, parents, now)
        pid, nid = program.program_id, node.node_id
        ticket = svc.controller.ticket(pid, nid, now, prompt_tokens=prompt_tokens)
        ticket.boost += chat.priority * PRIORITY_UNIT_S
        svc.controller.start_node(pid, nid, now)
        request = GenerationRequest(
            ticket,
            prompt,
            chat.max_tokens,
            chat.temperature,
            chat.top_p,
            chat.stop,
            cache_namespace=tenant,
            forced_output_tokens=chat.max_tokens if chat.ignore_eos else None,
        )
        data = {"prompt_tokens": prompt_tokens, "priority": chat.priority}
        svc.hub.emit(Event(now, EventKind.CALL_QUEUED, pid, nid, ticket.attempt, tenant, data))
        declared, _ = offered_tools(chat.tools, chat.tool_choice)
        try:
            call = LiveCall(request, svc.runtime, svc.accounting, tools_offered=bool(declared))
        except Exception as error:
            svc.nodes.fail_attempt(program, nid, now)
            raise Unavailable(f"the runtime refused the call: {error}") from error
        svc.register(call)
        if hashes is not None:
            svc.chains.record(tenant, hashes, pid, nid)
        return call

    def _inferred(
        self, tenant: str, hashes: list[bytes], chat: ChatCall
    ) -> tuple[Program, tuple[str, ...] | None]:
        svc = self.service
        link = svc.chains.find(tenant, hashes)
        if link is not None:
            program = svc.controller.programs.get(link[0])
            if program is not None and not program.state.terminal and program.tenant == tenant:
                return program, (link[1],) if link[1] in program.nodes else None
        labels = {**chat.labels, "inferred": "true"}
        pid = f"inferred-{uuid.uuid4().hex[:12]}"
        return svc.open_program(tenant, pid, deadline_s=chat.deadline_s, labels=labels), ()

    async def _wait_runtime(self) -> None:
        ready = self.service.runtime_ready
        if ready.is_set():
            return
        try:
            async with asyncio.timeout(self.service.ready_timeout_s):
                await ready.wait()
        except TimeoutError:
            raise Unavailable(
                "the runtime is still starting", headers={"Retry-After": "5"}
            ) from None
