"""The sandbox's slots are shared fairly: one tenant's backlog of long runs does not make
another tenant's short call wait for all of it (and time out)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentconsole.server.gateway import GatewayConfig, ToolGateway
from agentconsole.server.gateway.errors import GatewayError
from agentconsole.server.gateway.sandbox_spec import SandboxConfig
from agentconsole.server.gateway.slots import FairSlots
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import call, opened_gateway, register
from tests.server.gateway.sandbox_support import python_tool, require_sandbox

pytestmark = pytest.mark.anyio


async def _holder(slots: FairSlots, tenant: str, order: list[str], go: asyncio.Event) -> None:
    async with slots.hold(tenant):
        order.append(tenant)
        await go.wait()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_freed_slot_goes_to_the_tenant_holding_none_not_to_the_backlog() -> None:
    slots, order, go = FairSlots(1), list[str](), asyncio.Event()
    tasks = [asyncio.create_task(_holder(slots, "a", order, go)) for _ in range(3)]
    await _settle()
    tasks.append(asyncio.create_task(_holder(slots, "b", order, go)))  # queued last
    await _settle()
    go.set()
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "a", "a"]
    assert slots.held("a") == slots.held("b") == 0


async def test_a_tenant_at_its_cap_waits_while_slots_are_free_for_others() -> None:
    """Slots held for a long time (a downstream that never answers): one tenant takes at most
    its cap, and another's call starts at once, even behind the first one's queued calls."""
    slots, order, go = FairSlots(4, per_tenant=2), list[str](), asyncio.Event()
    tasks = [asyncio.create_task(_holder(slots, "a", order, go)) for _ in range(5)]
    await _settle()
    assert (slots.held("a"), order) == (2, ["a", "a"])
    tasks.append(asyncio.create_task(_holder(slots, "b", order, go)))
    await _settle()
    assert order == ["a", "a", "b"]
    go.set()
    await asyncio.gather(*tasks)
    assert order.count("a") == 5
    assert slots.held("a") == slots.held("b") == 0


async def test_a_cancelled_waiter_gives_up_its_place_and_no_slot_is_lost() -> None:
    slots, order, go = FairSlots(1), list[str](), asyncio.Event()
    first = asyncio.create_task(_holder(slots, "a", order, go))
    await _settle()
    gone = asyncio.create_task(_holder(slots, "b", order, go))
    after = asyncio.create_task(_holder(slots, "c", order, go))
    await _settle()
    gone.cancel()
    go.set()
    await asyncio.gather(first, after)
    assert order == ["a", "c"]
    async with slots.hold("b"):  # the slot came back
        assert slots.held("b") == 1


@pytest.fixture
async def one_slot(tmp_path: Path) -> AsyncIterator[ToolGateway]:
    config = GatewayConfig(sandbox=SandboxConfig(max_parallel=1), tenant_builtins=None)
    async with opened_gateway(tmp_path / "s.duckdb", config) as gateway:
        yield gateway


@pytest.mark.sandbox
async def test_a_tenants_backlog_does_not_time_out_another_tenants_short_call(
    one_slot: ToolGateway,
) -> None:
    gateway, port = one_slot, FakePort()
    await require_sandbox(gateway.sandbox)
    await register(gateway, python_tool("slow", timeout_s=20.0), operator=True)
    await register(gateway, python_tool("quick", timeout_s=2.5), operator=True)
    backlog = [
        asyncio.create_task(
            call(
                gateway,
                port,
                "slow",
                {"code": "import time; time.sleep(1.0)"},
                tenant="ta",
                program="pa",
                node=f"a{i}",
            )
        )
        for i in range(4)
    ]
    while not gateway.running():
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # every one of tenant ta's calls waits for the one slot
    # first come, first served, tenant tb's call would wait for all four runs (4 s > 2.5 s)
    quick = await call(gateway, port, "quick", {"code": "print(1)"}, tenant="tb", program="pb")
    assert isinstance(quick.result, dict)
    assert quick.result["stdout"] == "1\n"
    gateway.cancel_program("pa")  # interrupts the rest of the backlog (read-only)
    for task in backlog:
        with contextlib.suppress(GatewayError):
            await task
