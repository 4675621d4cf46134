"""Helpers of the SGLang lane: tickets, prompts of a given size, consuming streams."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agentconsole.scheduler.runtime import GenerationRequest, GenerationResult
from agentconsole.scheduler.ticket import CallTicket

_ids = itertools.count()


def ticket(program: str, tenant: str = "ta", **fields: Any) -> CallTicket:
    """A ticket for a new call of ``program`` (unique call id), arriving now."""
    n = next(_ids)
    return CallTicket(f"{program}/n{n}/1", program, f"n{n}", tenant, arrival=time.time(), **fields)


def started_runtime(run: Callable[[Awaitable[Any]], Any], **options: Any) -> Iterator[Any]:
    """A started ``SGLangRuntime`` with the plugin (``RuntimeOptions(**options)``), stopped
    when the generator is closed: the body of the lane's engine fixtures."""
    from agentconsole.server.runtime.registry import RuntimeOptions
    from agentconsole.server.runtime.sglang.adapter import create_runtime

    runtime = create_runtime(RuntimeOptions(policy="cp-cache", **options))
    run(runtime.start())
    yield runtime
    run(runtime.stop())


def words(n_tokens: int, engine: Any, seed: int) -> str:
    """Random lowercase words that tokenize to about ``n_tokens`` tokens (checked with the
    engine's own tokenizer, so cache-hit sizes in assertions are real token counts)."""
    rnd = random.Random(seed)
    tok = engine.engine.tokenizer_manager.tokenizer
    parts: list[str] = []
    while True:
        parts.append("".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6)))
        if len(tok.encode(" ".join(parts), add_special_tokens=False)) >= n_tokens:
            return " ".join(parts)


def request(
    t: CallTicket, prompt: str, out: int, namespace: str | None = None, **kw: Any
) -> GenerationRequest:
    return GenerationRequest(
        t,
        prompt,
        max_tokens=out,
        forced_output_tokens=out,
        cache_namespace=t.tenant if namespace is None else namespace,
        **kw,
    )


@dataclass(slots=True)
class Outcome:
    result: GenerationResult
    finished_at: float
    token_times: list[float] = field(default_factory=list)
    tokens: int = 0


async def consume(rt: Any, req: GenerationRequest) -> Outcome:
    """Submit ``req`` and read its stream to the end."""
    stream = rt.submit(req)
    times: list[float] = []
    tokens = 0
    async for delta in stream:
        times.append(time.time())
        tokens += delta.tokens
    result = await stream.result()
    return Outcome(result, time.time(), times, tokens)


async def started(rt: Any, call_id: str, timeout: float = 30.0) -> None:
    """Wait until ``call_id`` produced its first token (it is running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        call = rt._calls.get(call_id)
        if call is not None and call.first_at is not None:
            return
        await asyncio.sleep(0.005)
    raise TimeoutError(call_id)


async def queued(rt: Any, call_ids: set[str], timeout: float = 30.0) -> None:
    """Wait until the plugin's status shows every one of ``call_ids`` in SGLang's queue."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = rt.read_status()
        if status is not None and call_ids <= {q.rid for q in status.queued}:
            return
        await asyncio.sleep(0.005)
    raise TimeoutError(call_ids)
