"""``serve --demo``: replay the bundled ``seed-mix.small.jsonl`` against the server in rounds,
in the background, until the server stops.

The server calls ``await run_demo(url, keys)`` with its tenant keys (key -> tenant) once it
listens, in a task it cancels at shutdown. Tools go through the gateway when it is mounted
(else they are reported by the agent); prompts are scaled down (``token_scale``) so the small
CPU model copes. Errors of single programs are logged and the demo goes on.

Under ``serve --demo`` one agent also runs a Python snippet in the sandboxed code executor
(:func:`run_python_demo`: the ``demo_python`` tool, called like any gateway tool), unless the
server cannot run sandboxes.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from pathlib import Path

import httpx

from agentconsole.client import ApiError, AsyncAgentConsole
from agentconsole.replay.engine import run_replay
from agentconsole.replay.results import ReplayOptions, ToolMode
from agentconsole.sample_traces import load_trace

log = logging.getLogger(__name__)
PYTHON_TOOL = "demo_python"
PYTHON_PARAMETERS = {
    "type": "object",
    "properties": {"code": {"type": "string", "minLength": 1, "maxLength": 16384}},
    "required": ["code"],
    "additionalProperties": False,
}
PYTHON_SNIPPET = """import math, statistics
primes = [n for n in range(2, 60) if all(n % d for d in range(2, math.isqrt(n) + 1))]
print("primes below 60:", primes)
print("their mean:", round(statistics.mean(primes), 2))
"""


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
    python_tool: bool | None = None,
) -> None:
    """Replay the demo trace ``rounds`` times (forever when None); see the module docstring.
    ``python_tool``: run the sandbox demo first (default: when playing forever, as under
    ``serve --demo``)."""
    programs = load_trace(demo_trace())
    tenants = demo_keys(keys)
    run_id = uuid.uuid4().hex[:6]
    if (rounds is None if python_tool is None else python_tool) and tenants:
        try:
            tenant, key = sorted(tenants.items())[0]
            output = await run_python_demo(url, key, program_id=f"demo-{run_id}-python")
            log.info("demo: %s ran Python in the sandbox: %r", tenant, output)
        except ApiError as error:
            log.info("demo: the sandboxed Python tool failed (%s)", error)
    tools: ToolMode = "gateway"
    round_no = 0
    while rounds is None or round_no < rounds:
        options = ReplayOptions(
            tools=tools,
            token_scale=token_scale,
            max_output_tokens=256,
            id_prefix=f"demo-{run_id}-{round_no}-",
            labels=(("source", "demo"),),
            model="auto",  # several models served: each call's is the selector's choice
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


async def run_python_demo(
    url: str,
    key: str,
    *,
    program_id: str | None = None,
    http: httpx.AsyncClient | None = None,
) -> str | None:
    """Register ``key``'s :data:`PYTHON_TOOL` (a ``sandbox`` tool running the call's
    ``code``) and run :data:`PYTHON_SNIPPET` through it in a one-node program, as an agent
    would. Returns the snippet's stdout, or ``None`` when the server refuses sandbox tools
    (``sandbox_unavailable``). Other API errors are raised."""
    console = AsyncAgentConsole(url, key, http=http)
    try:
        try:
            await console.register_tool(
                PYTHON_TOOL,
                PYTHON_PARAMETERS,
                {"type": "sandbox", "language": "python", "limits": {"cpu_s": 5, "wall_s": 8}},
                description="demo: runs a Python snippet in the sandbox; stdout is the result",
                timeout_s=10.0,
            )
        except ApiError as error:
            if error.type != "sandbox_unavailable":
                raise
            log.info("demo: no sandboxed Python here: %s", error.message)
            return None
        program = await console.create_program(program_id, labels={"demo": "true"})
        answer = await console.call_tool(
            PYTHON_TOOL, program.program_id, "python-1", {"code": PYTHON_SNIPPET}
        )
        await console.finish_program(program.program_id)
        result = answer.result if isinstance(answer.result, dict) else {}
        return str(result.get("stdout", ""))
    finally:
        if http is None:
            await console.aclose()
