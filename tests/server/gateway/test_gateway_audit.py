"""The gateway's refusals are audited as the core API's are: within a budget of rows a
minute (an operator key's always), their target cut to the same bound."""

from __future__ import annotations

import asyncio

import pytest

from agentconsole.server.gateway import ToolGateway
from agentconsole.server.gateway.audit import AuditActor
from agentconsole.server.gateway.errors import GatewayError, ToolNotFound
from agentconsole.server.refusals import MAX_REFUSED_TARGET_CHARS, RefusalBudget
from agentconsole.server.store import Store, StoredAction
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import call

pytestmark = pytest.mark.anyio


async def _refused_rows(store: Store) -> list[StoredAction]:
    await asyncio.wrap_future(store.writer.flush())
    return [r for r in store.repo.audit_log(limit=1000) if r.action.result != "ok"]


async def test_a_tenants_refusals_are_audited_within_the_budget(
    store: Store, port: FakePort
) -> None:
    gateway = ToolGateway(store, refusals=RefusalBudget(per_minute=5))
    await gateway.start()
    for _ in range(12):
        with pytest.raises(ToolNotFound):
            await call(gateway, port, "nope", {}, tenant="tenant-b")
    # an operator key's refusal is no flood: audited past the budget, under its key id
    operator = AuditActor("operator-0123abcd", operator=True)
    with pytest.raises(ToolNotFound):
        await call(gateway, port, "nope", {}, tenant="operator", actor=operator)
    rows = await _refused_rows(store)
    await gateway.close()
    assert [r.action.actor for r in rows].count("tenant-b") == 5
    assert [r.action.actor for r in rows].count(operator.name) == 1
    assert gateway.audit.rejections == {"tool_not_found": 13}  # counted, audited or not
    assert gateway.audit.refusals.dropped == 7


async def test_one_tenants_flood_leaves_room_for_another_callers_refusals(
    store: Store, port: FakePort
) -> None:
    """Each caller's refusals are audited up to its own share of the minute: a tenant that
    floods cannot use the whole budget and hide another's refused calls."""
    gateway = ToolGateway(store, refusals=RefusalBudget(per_minute=10, per_actor=4))
    await gateway.start()
    for _ in range(12):
        with pytest.raises(ToolNotFound):
            await call(gateway, port, "nope", {}, tenant="tenant-b")
    with pytest.raises(ToolNotFound):
        await call(gateway, port, "probe", {}, tenant="tenant-c")
    rows = await _refused_rows(store)
    await gateway.close()
    actors = [r.action.actor for r in rows]
    assert actors.count("tenant-b") == 4
    assert actors.count("tenant-c") == 1


async def test_a_refused_calls_target_is_cut(store: Store, port: FakePort) -> None:
    gateway = ToolGateway(store)
    await gateway.start()
    long_name = "x" * 60_000
    with pytest.raises(GatewayError):
        await call(gateway, port, long_name, {}, tenant="tenant-b")
    with pytest.raises(GatewayError):  # a report's program id reaches the audit before its check
        await gateway.reports.finished("tenant-b", "p" * 60_000, b"{}", port)
    rows = await _refused_rows(store)
    await gateway.close()
    assert {r.action.action for r in rows} == {"tool.call", "tool.report"}
    assert all(len(r.action.target) <= MAX_REFUSED_TARGET_CHARS for r in rows)
    assert any(r.action.target.startswith("tool:xxx") for r in rows)
