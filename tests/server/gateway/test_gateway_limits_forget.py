"""The rate buckets a deleted tool leaves: none (they are dropped at the delete, full or not),
so a tenant that registers, calls and deletes fresh names does not grow the gateway's memory;
and a delete resets no limit that binds the tenant: a platform tool's bucket is not its own
tool's of the same name, and the program's tool-call quota still holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentconsole.server.gateway import GatewayConfig, ToolGateway
from agentconsole.server.gateway.errors import QuotaExceededError, RateLimited
from agentconsole.server.gateway.limits import ToolLimits
from agentconsole.server.store import Store
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import call, register, tool_body

ECHO = {"type": "builtin", "name": "echo"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _once(gate: ToolLimits, tenant: str, owner: str, tool: str, rate: float) -> None:
    gate.admit(tenant, tool, owner=owner, rate_per_s=rate, burst=2, max_concurrency=None)
    gate.release(tenant, tool, owner=owner)


def test_a_deleted_tools_buckets_are_dropped_at_once() -> None:
    """A very slow rate with a large burst would take long to refill: its bucket still goes
    at the delete, and only the deleted tool's buckets go."""
    gate = ToolLimits(Clock())
    _once(gate, "t", "t", "x", 0.001)  # one token short of 2: 1,000 s from full
    _once(gate, "u", "u", "x", 0.001)  # another tenant's tool of the name
    _once(gate, "t", "", "x", 0.001)  # the platform tool t's own "x" shadows
    gate.tool_deleted("t", "x")
    assert gate.buckets() == 2
    gate.tool_deleted("u", "x")
    assert gate.buckets() == 1
    _once(gate, "u", "", "x", 0.001)
    gate.tool_deleted("", "x")  # a platform tool: every tenant's bucket of it
    assert gate.buckets() == 0


def test_deleting_a_shadowing_tool_does_not_reset_the_platform_tools_limit() -> None:
    gate = ToolLimits(Clock())
    gate.admit("t", "x", owner="", rate_per_s=0.001, burst=1, max_concurrency=None)
    gate.release("t", "x", owner="")
    _once(gate, "t", "t", "x", 1_000_000.0)  # its own "x", as fast as it likes
    gate.tool_deleted("t", "x")
    with pytest.raises(RateLimited):
        gate.admit("t", "x", owner="", rate_per_s=0.001, burst=1, max_concurrency=None)


def test_register_call_delete_loops_do_not_grow_the_bucket_map() -> None:
    gate = ToolLimits(Clock(), sweep_at=64)
    for i in range(2000):
        _once(gate, "t", "t", f"t{i}", 10.0)
        gate.tool_deleted("t", f"t{i}")
        assert gate.buckets() == 0


def test_full_buckets_are_swept_past_the_bound() -> None:
    """Many tenants calling a platform tool now and then: their refilled buckets, the same
    as none, are swept once the map reaches its bound; one not yet full is kept."""
    clock = Clock()
    gate = ToolLimits(clock, sweep_at=8)

    def slow_call() -> None:  # a bucket of one token, 1,000 s to refill
        gate.admit("slow", "x", owner="", rate_per_s=0.001, burst=1, max_concurrency=None)
        gate.release("slow", "x", owner="")

    slow_call()
    most = 0
    for i in range(200):
        _once(gate, f"t{i}", "", "x", 10.0)
        clock.now += 1.0
        most = max(most, gate.buckets())
    assert most <= 8 + 1
    with pytest.raises(RateLimited):  # its bucket was not full: kept through every sweep
        slow_call()


@pytest.mark.anyio
async def test_the_gateway_delete_drops_the_buckets_and_the_limits_that_bind_still_do(
    tmp_path: Path,
) -> None:
    clock = Clock()
    with Store.open(tmp_path / "s.duckdb") as store:
        gateway = ToolGateway(store, GatewayConfig(tenant_builtins=None), clock=clock)
        await gateway.start()
        try:
            port = FakePort()
            port.create("t1", "p1", tool_calls=3)
            slow = {"rate_limit_per_s": 0.001, "burst": 1}
            await register(gateway, tool_body("lim", ECHO, **slow), operator=True)
            await call(gateway, port, "lim", {"text": "a"}, node="n1")  # the platform tool
            # the tenant shadows it with its own fast "lim", calls that, and deletes it
            fast = tool_body("lim", ECHO, rate_limit_per_s=1_000_000.0, burst=1)
            await register(gateway, fast)
            await call(gateway, port, "lim", {"text": "b"}, node="n2")
            await gateway.delete("t1", False, "lim")
            assert gateway.limits.buckets() == 1  # its own bucket went at once
            # the name resolves to the platform tool again, whose bucket is still empty
            with pytest.raises(RateLimited):
                await call(gateway, port, "lim", {"text": "c"}, node="n3")
            # registered again, its own tool starts full (see ``ToolLimits.tool_deleted``),
            # and the program's tool-call quota, used up, binds whatever the tool's bucket
            await register(gateway, fast)
            await call(gateway, port, "lim", {"text": "d"}, node="n4")
            await gateway.delete("t1", False, "lim")
            await register(gateway, fast)
            with pytest.raises(QuotaExceededError):
                await call(gateway, port, "lim", {"text": "e"}, node="n5")
            await gateway.delete("t1", False, "lim")
            await gateway.delete("", True, "lim")
            assert gateway.limits.buckets() == 0
        finally:
            await gateway.close()
