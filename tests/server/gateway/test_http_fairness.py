"""The http tools' connections are shared between tenants (the gateway's ``FairSlots``, a
quarter of the pool each at most): one tenant's calls to a downstream that never answers held
every connection of the pool, and another tenant's tool, which answers at once, timed out."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from agentconsole.server.gateway.executors import HttpExecutor, Invocation
from agentconsole.server.gateway.slots import FairSlots

pytestmark = pytest.mark.anyio


def _call(tenant: str, k: int) -> Invocation:
    return Invocation("t", f"{tenant}-{k}", tenant, "p", "n", {})


async def test_a_tenants_stuck_calls_leave_the_others_connections() -> None:
    stuck = asyncio.Event()  # never set: tenant a's downstream never answers

    async def downstream(request: httpx.Request) -> httpx.Response:
        if request.headers["X-Agentconsole-Tenant"] == "a":
            await stuck.wait()
        return httpx.Response(200, json={"ok": True})

    client = httpx.AsyncClient(transport=httpx.MockTransport(downstream))
    slots = FairSlots(4, per_tenant=2)
    tool = HttpExecutor("http://tool.example/run", client, 1_000, slots)
    hung = [asyncio.create_task(tool.run(_call("a", k))) for k in range(6)]
    await asyncio.sleep(0.05)
    assert slots.held("a") == 2  # the rest of a's calls wait for its own slots
    assert await asyncio.wait_for(tool.run(_call("b", 0)), 2.0) == {"ok": True}
    for task in hung:
        task.cancel()
    await asyncio.gather(*hung, return_exceptions=True)
    await client.aclose()
    assert slots.held("a") == 0
