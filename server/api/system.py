"""``/health`` (liveness), ``/ready`` (runtime answers, store writer alive, no drain),
``/metrics``.

None of them needs a key. ``/ready`` is 503 until the runtime has started and answers its
health probe, whenever the store's writer thread has died, and while an operator drains the
server (``POST /v1/operator/drain``, also when the drain was replayed at start): every new
generation call is then refused 503 ``draining``, so a load balancer must send it elsewhere.
A drain is a reason of its own in the body, so a caller that only waits for the process to be
up (the runtime and the store) can tell it apart. Each answers ``HEAD`` as it answers ``GET``,
the same status and headers without the body: load balancers probe with ``HEAD`` (not
published in the contract, which lists the ``GET`` operations).
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Controller, MediaType, Response, get, head
from litestar.utils.helpers import get_enum_string_value

from agentconsole.server.api.contract import contract
from agentconsole.server.api.deps import LiveDep
from agentconsole.server.prometheus import CONTENT_TYPE

PROBE_TIMEOUT_S = 2.0
HEALTHY = {"status": "ok"}
_READINESS = {
    "type": "object",
    "required": ["runtime", "store", "draining"],
    "properties": {
        "runtime": {"type": "boolean"},
        "store": {"type": "boolean"},
        # the one part that is not ready when true: an operator's drain refuses new calls
        "draining": {"type": "boolean"},
    },
}
_NOT_READY = {
    "description": "Not ready: which part is not",
    "content": {"application/json": {"schema": _READINESS}},
}


def head_of(answer: Response[Any]) -> Response[None]:
    """``answer`` as the answer to ``HEAD``: its status and headers, and the ``Content-Length``
    of the body a ``GET`` gets, but no body (the server sends none to ``HEAD``, RFC 9110 9.3.2);
    ``answer`` is left as it was."""
    media_type = get_enum_string_value(answer.media_type or MediaType.JSON)
    body = answer.render(answer.content, media_type)
    headers = {**answer.headers, "content-length": str(len(body))}
    return Response(None, status_code=answer.status_code, headers=headers, media_type=media_type)


async def readiness(live: LiveDep) -> Response[dict[str, Any]]:
    """``/ready``'s answer: 200 when the runtime answers, the store writer is alive and no
    operator's drain is on, else 503, with which part is not."""
    body = {
        "runtime": await runtime_answers(live),
        "store": live.store.writer.alive,
        "draining": live.service.draining,
    }
    ok = body["runtime"] and body["store"] and not body["draining"]
    return Response(body, status_code=200 if ok else 503)


def metrics_text(live: LiveDep) -> Response[bytes]:
    """``/metrics``'s answer: the Prometheus text of the ``agentconsole_*`` series."""
    return Response(live.prometheus.render(), media_type=CONTENT_TYPE)


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
        return HEALTHY

    @head("/health", include_in_schema=False)
    async def health_head(self) -> Response[None]:
        """``GET /health`` without its body."""
        return head_of(Response(HEALTHY))

    @get("/ready", summary="Readiness", opt=contract(public=True, responses={503: _NOT_READY}))
    async def ready(self, live: LiveDep) -> Response[dict[str, Any]]:
        """200 when the runtime answers, the store writer is alive and the server is not
        draining, else 503."""
        return await readiness(live)

    @head("/ready", include_in_schema=False)
    async def ready_head(self, live: LiveDep) -> Response[None]:
        """``GET /ready`` without its body: its status (the same probe) and headers."""
        return head_of(await readiness(live))

    @get(
        "/metrics",
        summary="Prometheus metrics",
        media_type=CONTENT_TYPE,
        opt=contract(public=True),
    )
    async def metrics(self, live: LiveDep) -> Response[bytes]:
        """``agentconsole_*`` series (no per-program labels)."""
        return metrics_text(live)

    @head("/metrics", include_in_schema=False)
    async def metrics_head(self, live: LiveDep) -> Response[None]:
        """``GET /metrics`` without its body."""
        return head_of(metrics_text(live))
