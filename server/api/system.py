"""``/health`` (liveness), ``/ready`` (runtime answers and store writer alive), ``/metrics``.

None of them needs a key. ``/ready`` is 503 until the runtime has started and answers its
health probe, and whenever the store's writer thread has died.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Controller, Response, get

from agentconsole.server.api.contract import contract
from agentconsole.server.api.deps import LiveDep
from agentconsole.server.prometheus import CONTENT_TYPE

PROBE_TIMEOUT_S = 2.0
_READINESS = {
    "type": "object",
    "required": ["runtime", "store"],
    "properties": {"runtime": {"type": "boolean"}, "store": {"type": "boolean"}},
}
_NOT_READY = {
    "description": "Not ready: which part is not",
    "content": {"application/json": {"schema": _READINESS}},
}


async def runtime_answers(live: LiveDep) -> bool:
    """The runtime started and its health probe answered True in time."""
    if not live.service.runtime_ready.is_set():
        return False
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            return await live.service.runtime.healthy()
    except Exception:
        return False


class SystemController(Controller):
    path = "/"
    tags = ("system",)

    @get("/health", summary="Liveness", opt=contract(public=True))
    async def health(self) -> dict[str, str]:
        """200 while the process serves HTTP."""
        return {"status": "ok"}

    @get("/ready", summary="Readiness", opt=contract(public=True, responses={503: _NOT_READY}))
    async def ready(self, live: LiveDep) -> Response[dict[str, Any]]:
        """200 when the runtime answers and the store writer is alive, else 503."""
        body = {"runtime": await runtime_answers(live), "store": live.store.writer.alive}
        ok = body["runtime"] and body["store"]
        return Response(body, status_code=200 if ok else 503)

    @get(
        "/metrics",
        summary="Prometheus metrics",
        media_type=CONTENT_TYPE,
        opt=contract(public=True),
    )
    async def metrics(self, live: LiveDep) -> Response[bytes]:
        """``agentconsole_*`` series (no per-program labels)."""
        return Response(live.prometheus.render(), media_type=CONTENT_TYPE)
