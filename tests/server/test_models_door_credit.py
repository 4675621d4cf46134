"""``serve`` over several models credits a new program at the door by ``bench --models``'s rule
(``runtime/prefixcredit.py``): its first call may run on any candidate model, so the door is
told what the least of them holds of its first prompt (each probed with the prompt in its own
tokens), not what the fleet's probe answers (the default model's alone).

Over two simulated models: the default (``big``) ran a program with a system prompt and a tool
schema, ``small`` one with the system prompt alone; then a new program with both arrives."""

from __future__ import annotations

import asyncio
from typing import Any

from agentconsole.scheduler.models import ServedModel
from agentconsole.scheduler.runtime import PrefixProbe
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.intake import ChatCall
from agentconsole.server.live.service import DoorSettings, ProgramService
from agentconsole.server.runtime.fleet.build import build_runtime
from agentconsole.server.runtime.registry import RuntimeOptions

MODELS = (
    ServedModel("big", source="llama-3.1-70b", tier=2, tp=4),  # the default model
    ServedModel("small", source="llama-3.1-8b", tier=1),
)
TENANT = "t"
SYSTEM = "You are a careful coding agent working in a large repository. " * 40
SCHEMA = " Tools: search(query), open(path), edit(path, patch), run_tests(). " * 40


def _chat(program_id: str, system: str, task: str, candidates: tuple[str, ...] | None) -> ChatCall:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    return ChatCall(messages, 8, program_id=program_id, model_candidates=candidates)


async def _credited(candidates: tuple[str, ...] | None) -> int:
    """The tokens of the new program's first prompt the door is told the engines hold, its
    call listing ``candidates`` (None: ``model: auto``)."""
    fleet = build_runtime("sim", RuntimeOptions(extra={"time_scale": 0.0}), MODELS)
    await fleet.start()
    service = ProgramService(fleet, EventHub(), door=DoorSettings(enabled=True))
    service.runtime_ready.set()
    try:
        warm = (("warm-big", SYSTEM + SCHEMA, "big"), ("warm-small", SYSTEM, "small"))
        for program_id, system, model in warm:
            call = await service.start_call(TENANT, _chat(program_id, system, "warm", (model,)))
            await call.outcome()
        told: list[PrefixProbe | None] = []
        arrive = service.driver.arrive

        def recorded(*args: Any, **kwargs: Any) -> bool:
            told.append(kwargs.get("held"))
            return arrive(*args, **kwargs)

        service.driver.arrive = recorded  # type: ignore[method-assign]
        chat = _chat("new", SYSTEM + SCHEMA, "fix the failing test", candidates)
        await (await service.start_call(TENANT, chat)).outcome()
        (held,) = told
        assert held is not None
        return held.hit_tokens
    finally:
        await service.stop()
        await fleet.stop()


def test_a_new_program_is_credited_with_what_the_least_of_its_candidates_holds() -> None:
    on_big = asyncio.run(_credited(("big",)))
    on_small = asyncio.run(_credited(("small",)))
    assert on_big > on_small > 0  # the system prompt on both, the schema on big alone
    # either model may run its first call: only the system prompt is sure
    assert asyncio.run(_credited(("big", "small"))) == on_small
    assert asyncio.run(_credited(("small", "big"))) == on_small
    assert asyncio.run(_credited(None)) == on_small  # none listed, ``auto``: every model
