"""Replaying a trace against a live server in real time: arrivals, tenants, tools, stop.

``await run_replay(base_url, api_keys_by_tenant, programs, speed, stop_event)`` plays every
program at its arrival offset (divided by ``speed``), concurrently, and returns a
:class:`ReplaySummary`. It is what ``agentconsole replay`` runs, and what ``serve --demo``
runs in the background (through :func:`agentconsole.replay.demo.run_demo`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

import httpx

from agentconsole.client import AsyncAgentConsole
from agentconsole.replay.agent import GATEWAY_TOOLS, ProgramAgent
from agentconsole.replay.results import ProgramOutcome, ReplayOptions, ReplaySummary
from agentconsole.sample_traces import ToolNode, TraceProgram

Progress = Callable[[ProgramOutcome], None]
SLEEP_PARAMETERS = {
    "type": "object",
    "properties": {
        "seconds": {"type": "number", "minimum": 0, "maximum": 600},
        "fail": {"type": "boolean"},
    },
    "required": ["seconds"],
    "additionalProperties": False,
}


def assign_keys(
    programs: Iterable[TraceProgram], api_keys_by_tenant: Mapping[str, str]
) -> dict[str, str]:
    """The key each trace tenant plays with: its own when ``api_keys_by_tenant`` has it, else
    the ``"*"`` entry's, else the given keys in turn (sorted, so the assignment is stable).
    ``ValueError`` if there is no key at all."""
    keys = sorted(set(api_keys_by_tenant.values()))
    if not keys:
        raise ValueError("no API key to replay with")
    default = api_keys_by_tenant.get("*")
    tenants = sorted({p.tenant for p in programs})
    spare = [t for t in tenants if t not in api_keys_by_tenant]
    assigned = {t: api_keys_by_tenant[t] for t in tenants if t in api_keys_by_tenant}
    assigned.update({t: default or keys[i % len(keys)] for i, t in enumerate(spare)})
    return assigned


async def register_tools(
    http: httpx.AsyncClient, base_url: str, keys: Iterable[str], timeout_s: float
) -> None:
    """Register the builtin ``sleep`` tools of gateway mode for every tenant key (each tenant
    owns its copy): read-only, side-effecting with a downstream key, and without one."""
    for key in sorted(set(keys)):
        console = AsyncAgentConsole(base_url, key, http=http)
        for (side_effect, idempotent), name in sorted(GATEWAY_TOOLS.items()):
            if (side_effect, idempotent) == (False, False):
                continue  # the read-only entry is registered once, idempotent
            await console.register_tool(
                name,
                SLEEP_PARAMETERS,
                {"type": "builtin", "name": "sleep"},
                description="replay: waits the recorded tool latency",
                side_effect=side_effect,
                idempotent=idempotent,
                timeout_s=timeout_s,
            )


def _tool_timeout(programs: Sequence[TraceProgram], speed: float) -> float:
    longest = max(
        (
            a.latency_s
            for p in programs
            for n in p.nodes
            if isinstance(n, ToolNode)
            for a in n.attempts
        ),
        default=1.0,
    )
    return min(longest / speed + 5.0, 600.0)


async def run_replay(
    base_url: str,
    api_keys_by_tenant: Mapping[str, str],
    programs: Sequence[TraceProgram],
    speed: float = 1.0,
    stop_event: asyncio.Event | None = None,
    *,
    options: ReplayOptions | None = None,
    progress: Progress | None = None,
) -> ReplaySummary:
    """Play ``programs`` against the server at ``base_url``; see the module docstring.

    ``api_keys_by_tenant`` maps trace tenants to API keys (see :func:`assign_keys`).
    ``options`` sets the rest (its ``speed`` is replaced by ``speed``). Setting
    ``stop_event`` stops the replay: programs not arrived yet are ``skipped``, programs in
    flight are cancelled on the server. ``progress`` is called with each program's outcome.
    Raises only if the gateway tools cannot be registered (gateway mode).
    """
    options = replace(options or ReplayOptions(), speed=speed)
    keys = assign_keys(programs, api_keys_by_tenant)
    stop = stop_event or asyncio.Event()
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=128)
    timeout = httpx.Timeout(options.request_timeout_s, connect=10.0)
    started = time.monotonic()
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:
        if options.tools == "gateway":
            await register_tools(http, base_url, keys.values(), _tool_timeout(programs, speed))

        async def play(program: TraceProgram) -> ProgramOutcome:
            agent = ProgramAgent(http, base_url.rstrip("/"), keys[program.tenant], program, options)
            delay = started + program.arrival_s / options.speed - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
            if stop.is_set():
                outcome = ProgramOutcome(agent.program_id, program.tenant, "skipped", 0.0)
            else:
                outcome = await _until_stopped(agent, stop)
            if progress is not None:
                progress(outcome)
            return outcome

        outcomes = await asyncio.gather(*(play(p) for p in programs))
    return ReplaySummary(tuple(outcomes), time.monotonic() - started)


async def _until_stopped(agent: ProgramAgent, stop: asyncio.Event) -> ProgramOutcome:
    """Run ``agent``; if ``stop`` is set first, cancel it (and so the program on the server)."""
    run = asyncio.create_task(agent.run())
    stopped = asyncio.create_task(stop.wait())
    started = time.monotonic()
    await asyncio.wait({run, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if run.done():
        return run.result()
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
    return ProgramOutcome(
        agent.program_id, agent.program.tenant, "cancelled", time.monotonic() - started,
        agent.llm_calls, agent.tool_calls, "replay stopped",
    )  # fmt: skip
