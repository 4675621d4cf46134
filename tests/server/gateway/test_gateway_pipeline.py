"""The call pipeline against a real store: execute once, replay, refuse, fail, cancel."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agentconsole.server.gateway import ToolGateway
from agentconsole.server.gateway.errors import (
    GatewayError,
    IdempotencyMismatch,
    InProgress,
    InvalidArguments,
    NeedsReconcile,
    ProgramNotFoundError,
    ProgramNotRunning,
    QuotaExceededError,
    ShuttingDown,
    ToolFailed,
    ToolTimeout,
)
from agentconsole.server.store import IntentState, Store, make_tool_call_id
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import (
    applied,
    call,
    obj,
    register,
    register_ledger,
    tool_body,
)

pytestmark = pytest.mark.anyio
SLEEP = {"type": "builtin", "name": "sleep"}
SLEEP_PARAMS = obj(
    seconds={"type": "number", "minimum": 0, "maximum": 60}, fail={"type": "boolean"}
)


async def test_first_call_commits_and_a_retry_replays_without_executing(
    gateway: ToolGateway, port: FakePort, ledger: Path
) -> None:
    await register_ledger(gateway)
    first = await call(gateway, port, "ledger", {"account": "a", "amount": 5})
    again = await call(gateway, port, "ledger", {"account": "a", "amount": 5})
    assert first.status == "committed"
    assert again.status == "replayed"
    assert again.result == first.result
    assert again.latency_s == pytest.approx(first.latency_s)
    assert first.tool_call_id == make_tool_call_id("p1", "n1", 1)
    assert applied(ledger) == {first.tool_call_id: 1}
    assert gateway.runner.executions == 1
    assert [e[0] for e in port.events] == ["started", "finished"]


async def test_same_key_other_arguments_is_422_and_never_executes(
    gateway: ToolGateway, port: FakePort, ledger: Path
) -> None:
    await register_ledger(gateway)
    await call(gateway, port, "ledger", {"account": "a", "amount": 5})
    with pytest.raises(IdempotencyMismatch) as info:
        await call(gateway, port, "ledger", {"account": "a", "amount": 6})
    assert info.value.status == 422
    assert gateway.runner.executions == 1
    assert sum(applied(ledger).values()) == 1


async def test_a_new_attempt_is_a_new_key_and_runs_again(
    gateway: ToolGateway, port: FakePort, ledger: Path
) -> None:
    await register_ledger(gateway)
    one = await call(gateway, port, "ledger", {"account": "a", "amount": 5})
    two = await call(gateway, port, "ledger", {"account": "a", "amount": 6}, attempt=2)
    assert one.tool_call_id != two.tool_call_id
    assert two.status == "committed"
    assert sum(applied(ledger).values()) == 2


async def test_concurrent_duplicates_execute_once_and_all_get_the_result(
    gateway: ToolGateway, port: FakePort, ledger: Path
) -> None:
    await register_ledger(gateway)
    results = await asyncio.gather(
        *(call(gateway, port, "ledger", {"account": "a", "amount": 1}) for _ in range(20))
    )
    assert sorted(r.status for r in results).count("committed") == 1
    assert {str(r.result) for r in results} == {str(results[0].result)}
    assert gateway.runner.executions == 1
    assert sum(applied(ledger).values()) == 1


async def test_invalid_arguments_never_reach_the_executor(
    gateway: ToolGateway, port: FakePort, ledger: Path
) -> None:
    await register_ledger(gateway)
    with pytest.raises(InvalidArguments) as info:
        await call(gateway, port, "ledger", {"account": "a", "amount": "5"})
    assert info.value.field == "arguments/amount"
    assert gateway.runner.executions == 0
    assert not ledger.exists()
    assert port.programs == {}  # refused before the node was created


async def test_another_tenants_program_is_404_before_anything_runs(
    gateway: ToolGateway, port: FakePort
) -> None:
    await register_ledger(gateway)
    port.create("t2", "theirs")
    with pytest.raises(ProgramNotFoundError) as info:
        await call(gateway, port, "ledger", {"account": "a", "amount": 1}, program="theirs")
    assert info.value.status == 404
    assert gateway.runner.executions == 0


async def test_tool_call_quota_is_429(gateway: ToolGateway, port: FakePort) -> None:
    await register(gateway, tool_body("echo", {"type": "builtin", "name": "echo"}))
    port.create("t1", "p1", tool_calls=1)
    await call(gateway, port, "echo", {"text": "a"}, node="n1")
    await call(gateway, port, "echo", {"text": "a"}, node="n1")  # a retry is not a new call
    with pytest.raises(QuotaExceededError) as info:
        await call(gateway, port, "echo", {"text": "a"}, node="n2")
    assert info.value.status == 429
    assert gateway.runner.executions == 1


async def test_timeout_of_a_read_only_tool_is_retryable_with_the_same_key(
    gateway: ToolGateway, port: FakePort
) -> None:
    await register(gateway, tool_body("sleep", SLEEP, parameters=SLEEP_PARAMS, timeout_s=0.05))
    with pytest.raises(ToolTimeout) as info:
        await call(gateway, port, "sleep", {"seconds": 1})
    assert info.value.status == 424
    assert info.value.extra["retryable"] is True
    with pytest.raises(ToolTimeout):
        await call(gateway, port, "sleep", {"seconds": 1})
    assert gateway.runner.executions == 2  # re-executed, same key
    assert ("finished", "p1", "n1", "timeout") in port.events


async def test_timeout_of_a_non_idempotent_side_effect_needs_reconcile(
    gateway: ToolGateway, port: FakePort
) -> None:
    body = tool_body("sleepy_effect", SLEEP, parameters=SLEEP_PARAMS, timeout_s=0.05)
    await register(gateway, {**body, "side_effect": True, "idempotent": False})
    with pytest.raises(NeedsReconcile) as info:
        await call(gateway, port, "sleepy_effect", {"seconds": 1})
    assert info.value.extra["retryable"] is False
    with pytest.raises(NeedsReconcile):  # a retry is refused too: the effect is in doubt
        await call(gateway, port, "sleepy_effect", {"seconds": 1})
    assert gateway.runner.executions == 1  # never re-run automatically
    intent = gateway.store.repo.get_intent(make_tool_call_id("p1", "n1", 1))
    assert intent is not None
    assert intent.state == "needs_reconcile"  # listed for operators


async def test_a_definite_failure_is_retryable_even_for_side_effects(
    gateway: ToolGateway, port: FakePort
) -> None:
    body = tool_body("flaky", SLEEP, parameters=SLEEP_PARAMS, side_effect=True, idempotent=False)
    await register(gateway, body)
    with pytest.raises(ToolFailed) as info:
        await call(gateway, port, "flaky", {"seconds": 0, "fail": True})
    assert info.value.extra["retryable"] is True
    assert gateway.store.repo.get_intent(make_tool_call_id("p1", "n1", 1)) is not None


async def test_cancel_interrupts_read_only_tools_and_flags_side_effects(
    gateway: ToolGateway, port: FakePort
) -> None:
    await register(gateway, tool_body("sleep", SLEEP, parameters=SLEEP_PARAMS))
    body = tool_body("effect", SLEEP, parameters=SLEEP_PARAMS, side_effect=True, idempotent=False)
    await register(gateway, body)
    read = asyncio.create_task(call(gateway, port, "sleep", {"seconds": 5}, node="r"))
    write = asyncio.create_task(call(gateway, port, "effect", {"seconds": 0.2}, node="w"))
    while len(gateway.running()) < 2:
        await asyncio.sleep(0.01)
    report = gateway.cancel_program("p1")
    assert [t.node_id for t in report.interrupted] == ["r"]
    assert [t.node_id for t in report.flagged] == ["w"]
    with pytest.raises(ProgramNotRunning):
        await read
    assert (await write).status == "committed"  # the effect was let finish and recorded


async def test_a_cancelled_program_starts_no_new_tool(gateway: ToolGateway, port: FakePort) -> None:
    await register(gateway, tool_body("echo", {"type": "builtin", "name": "echo"}))
    port.create("t1", "p1").state = "cancelled"
    with pytest.raises(ProgramNotRunning):
        await call(gateway, port, "echo", {"text": "x"})
    assert gateway.runner.executions == 0


async def test_a_caller_that_goes_away_does_not_strand_the_intent(
    gateway: ToolGateway, port: FakePort
) -> None:
    await register(gateway, tool_body("sleep", SLEEP, parameters=SLEEP_PARAMS))
    task = asyncio.create_task(call(gateway, port, "sleep", {"seconds": 0.1}))
    await asyncio.sleep(0.03)
    task.cancel()
    key = make_tool_call_id("p1", "n1", 1)
    deadline = time.monotonic() + 5  # ~0.2 s on a quiet host; a loaded one took up to 1 s
    while (intent := gateway.store.repo.get_intent(key)) is None or (
        intent.state is not IntentState.COMMITTED and time.monotonic() < deadline
    ):
        assert time.monotonic() < deadline, "the intent was never written"
        await asyncio.sleep(0.02)
    assert intent.state is IntentState.COMMITTED
    assert (await call(gateway, port, "sleep", {"seconds": 0.1})).status == "replayed"


async def test_every_refusal_is_audited(gateway: ToolGateway, port: FakePort) -> None:
    await register_ledger(gateway)
    refusals = 0
    for args in ({"account": "a"}, {"account": "../x", "amount": 1}, {"x": 1}):
        with pytest.raises(GatewayError):
            await call(gateway, port, "ledger", args)
        refusals += 1
    with pytest.raises(GatewayError):
        await call(gateway, port, "nope", {})
    refusals += 1
    await asyncio.wrap_future(gateway.store.writer.flush())
    rows = gateway.store.repo.audit_log(limit=100)
    rejected = [r for r in rows if r.action.action == "tool.call" and r.action.result != "ok"]
    assert len(rejected) == refusals
    assert {r.action.actor for r in rejected} == {"t1"}


async def test_closing_mid_effect_leaves_it_for_recovery_to_flag(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    gateway = ToolGateway(store)
    await gateway.start()
    port = FakePort()
    body = tool_body("effect", SLEEP, parameters=SLEEP_PARAMS, side_effect=True, idempotent=False)
    await register(gateway, body)
    await register(gateway, tool_body("sleep", SLEEP, parameters=SLEEP_PARAMS))
    effect = asyncio.create_task(call(gateway, port, "effect", {"seconds": 5}, node="w"))
    read = asyncio.create_task(call(gateway, port, "sleep", {"seconds": 5}, node="r"))
    while len(gateway.running()) < 2:
        await asyncio.sleep(0.01)
    await gateway.close(timeout=0.2)
    _, stopped = await asyncio.gather(effect, read, return_exceptions=True)
    # the read-only call was stopped by the server, not by a cancel: 503, retry it (a 409
    # program_not_running would tell its agent that the program was cancelled)
    assert isinstance(stopped, ShuttingDown)
    assert stopped.status == 503
    assert stopped.extra["retryable"] is True
    store.close()
    with Store.open(tmp_path / "s.duckdb") as reopened:
        assert reopened.intents.recovery.needs_reconcile == (make_tool_call_id("p1", "w", 1),)
        read_intent = reopened.repo.get_intent(make_tool_call_id("p1", "r", 1))
        assert read_intent is not None
        assert read_intent.state is IntentState.RETRYABLE


async def test_a_side_effect_committed_after_a_cancel_replays_to_the_retry(
    gateway: ToolGateway, port: FakePort
) -> None:
    body = tool_body("effect", SLEEP, parameters=SLEEP_PARAMS, side_effect=True, idempotent=False)
    await register(gateway, body)
    args = {"seconds": 0.3}
    first = asyncio.create_task(call(gateway, port, "effect", args, node="w"))
    while not gateway.running():
        await asyncio.sleep(0.01)
    port.programs["p1"].state = "cancelled"
    assert [t.node_id for t in gateway.cancel_program("p1").flagged] == ["w"]
    with pytest.raises(InProgress):  # the effect still runs: retry later, not "not running"
        await call(gateway, port, "effect", args, node="w")
    committed = await first
    again = await call(gateway, port, "effect", args, node="w")
    assert again.status == "replayed"
    assert again.result == committed.result
    assert gateway.runner.executions == 1
    with pytest.raises(ProgramNotRunning):  # other arguments: a new call, not a retry
        await call(gateway, port, "effect", {"seconds": 0.1}, node="w")
    with pytest.raises(ProgramNotRunning):  # a new call needs a running program
        await call(gateway, port, "effect", args, node="w2")
    assert gateway.runner.executions == 1


async def test_a_replayed_result_ends_a_tool_node_left_running_by_a_crash(
    gateway: ToolGateway, port: FakePort, ledger: Path
) -> None:
    await register_ledger(gateway)
    first = await call(gateway, port, "ledger", {"account": "a", "amount": 5})
    port.programs["p1"].running.add("n1")  # rebuilt running: the crash came before its end
    again = await call(gateway, port, "ledger", {"account": "a", "amount": 5})
    assert again.status == "replayed"
    assert port.events[-1] == ("finished", "p1", "n1", "ok")
    assert not port.programs["p1"].running
    assert applied(ledger) == {first.tool_call_id: 1}
