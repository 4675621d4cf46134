"""``serve --demo``: replay the bundled ``seed-mix.small.jsonl`` against the server in rounds,
in the background, until the server stops.

The server calls ``await run_demo(url, keys)`` with its tenant keys (key -> tenant) once it
listens, in a task it cancels at shutdown. Tools go through the gateway when it is mounted
(else they are reported by the agent); prompts are scaled down (``token_scale``) so the small
CPU model copes. Errors of single programs are logged and the demo goes on.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from pathlib import Path

from agentconsole.client import ApiError
from agentconsole.replay.engine import run_replay
from agentconsole.replay.results import ReplayOptions, ToolMode
from agentconsole.sample_traces import load_trace

log = logging.getLogger(__name__)


def demo_trace() -> Path:
    """The bundled sample trace the demo plays."""
    import agentconsole.sample_traces as traces

    return Path(traces.__file__).resolve().parent / "seed-mix.small.jsonl"


def demo_keys(keys: Mapping[str, str]) -> dict[str, str]:
    """tenant -> key from the server's key -> tenant, preferring the demo tenants."""
    by_tenant = {tenant: key for key, tenant in sorted(keys.items())}
    demo = {t: k for t, k in by_tenant.items() if t.startswith("tenant-")}
    return demo or by_tenant


async def run_demo(
    url: str,
    keys: Mapping[str, str],
    *,
    rounds: int | None = None,
    speed: float = 1.0,
    token_scale: float = 0.02,
    stop_event: asyncio.Event | None = None,
) -> None:
    """Replay the demo trace ``rounds`` times (forever when None); see the module docstring."""
    programs = load_trace(demo_trace())
    tenants = demo_keys(keys)
    run_id = uuid.uuid4().hex[:6]
    tools: ToolMode = "gateway"
    round_no = 0
    while rounds is None or round_no < rounds:
        options = ReplayOptions(
            tools=tools,
            token_scale=token_scale,
            max_output_tokens=256,
            id_prefix=f"demo-{run_id}-{round_no}-",
            labels=(("source", "demo"),),
        )
        try:
            summary = await run_replay(url, tenants, programs, speed, stop_event, options=options)
        except ApiError as error:
            if tools == "agent":
                raise
            log.info("demo: gateway tools unavailable (%s); tools are reported instead", error)
            tools = "agent"
            continue
        log.info("demo round %d: %s", round_no, summary.render().splitlines()[0])
        if stop_event is not None and stop_event.is_set():
            return
        round_no += 1
