"""The rate buckets a deleted tool leaves: a tenant that registers, calls and deletes fresh
names does not grow the gateway's memory without end (full buckets are dropped at the delete
and swept past a bound), and deleting a tool and registering it again resets no limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentconsole.server.gateway import GatewayConfig, ToolGateway
from agentconsole.server.gateway.errors import RateLimited
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


def _once(gate: ToolLimits, tenant: str, tool: str, rate: float, burst: int | None) -> None:
    gate.admit(tenant, tool, rate_per_s=rate, burst=burst, max_concurrency=None)
    gate.release(tenant, tool)


def test_a_deleted_tools_full_bucket_is_dropped_and_a_partial_one_kept() -> None:
    clock = Clock()
    gate = ToolLimits(clock)
    _once(gate, "t", "x", 1.0, 2)
    gate.tool_deleted("t", "x")  # one token short: kept
    assert gate.buckets() == 1
    clock.now += 1.0
    gate.tool_deleted("u", "x")  # another tenant's tool of the name: not this bucket
    assert gate.buckets() == 1
    gate.tool_deleted("t", "x")  # refilled: the same as a new one
    assert gate.buckets() == 0
    _once(gate, "t", "y", 1.0, 2)
    _once(gate, "u", "y", 1.0, 2)
    clock.now += 1.0
    gate.tool_deleted("", "y")  # a platform tool: every tenant's bucket of it
    assert gate.buckets() == 0


@pytest.mark.parametrize("step", [0.0, 0.05])
def test_register_call_delete_loops_do_not_grow_the_bucket_map(step: float) -> None:
    """Fresh names, each called once and deleted at once (its bucket not yet full): the
    sweep past the bound drops the ones that refilled since."""
    clock = Clock()
    gate = ToolLimits(clock, sweep_at=64)
    most = 0
    for i in range(2000):
        _once(gate, "t", f"t{i}", 10.0, None)
        gate.tool_deleted("t", f"t{i}")
        most = max(most, gate.buckets())
        clock.now += step if step else 1.0 if i % 100 == 99 else 0.0
    assert most <= 2 * 64 + 1


def test_a_delete_and_register_again_does_not_reset_the_rate_limit() -> None:
    clock = Clock()
    gate = ToolLimits(clock, sweep_at=4)
    for _ in range(3):
        _once(gate, "t", "x", 0.5, 3)
    gate.tool_deleted("t", "x")
    for i in range(20):  # other names, enough to sweep: a partial bucket is not swept
        _once(gate, "t", f"o{i}", 0.5, 3)
    with pytest.raises(RateLimited):
        _once(gate, "t", "x", 0.5, 3)


@pytest.mark.anyio
async def test_the_gateway_delete_forgets_the_full_bucket_and_keeps_the_limit(
    tmp_path: Path,
) -> None:
    clock = Clock()
    with Store.open(tmp_path / "s.duckdb") as store:
        gateway = ToolGateway(store, GatewayConfig(tenant_builtins=None), clock=clock)
        await gateway.start()
        try:
            port = FakePort()
            body = tool_body("lim", ECHO, rate_limit_per_s=1.0, burst=1)
            await register(gateway, body)
            await call(gateway, port, "lim", {"text": "a"}, node="n1")
            await gateway.delete("t1", False, "lim")
            await register(gateway, body)
            # the bucket was empty at the delete: the name registered again is still limited
            with pytest.raises(RateLimited):
                await call(gateway, port, "lim", {"text": "b"}, node="n2")
            clock.now += 1.0
            await gateway.delete("t1", False, "lim")
            assert gateway.limits.buckets() == 0  # refilled at the delete: dropped
            for i in range(50):
                clock.now += 1.0
                await register(gateway, tool_body(f"t{i}", ECHO, rate_limit_per_s=1.0))
                await call(gateway, port, f"t{i}", {"text": "c"}, node=f"c{i}")
                clock.now += 1.0
                await gateway.delete("t1", False, f"t{i}")
            assert gateway.limits.buckets() == 0
        finally:
            await gateway.close()
