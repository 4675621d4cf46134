"""The server's stop as the gateway sees it (``ToolGateway.shut_down``, before the HTTP
server waits for its connections): every caller is answered within ``SHUTDOWN_ANSWER_S``, a
read-only tool interrupted (its intent retryable), a side effect answered 503 but left to run
to its commit at ``close``, and a call arriving meanwhile refused without running."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agentconsole.server.gateway import ToolGateway
from agentconsole.server.gateway.errors import ShuttingDown
from agentconsole.server.gateway.runner import SHUTDOWN_ANSWER_S
from agentconsole.server.store import IntentState, Store, make_tool_call_id
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import call, obj, register, tool_body

pytestmark = pytest.mark.anyio
SLEEP = {"type": "builtin", "name": "sleep"}
SLEEP_PARAMS = obj(seconds={"type": "number", "minimum": 0, "maximum": 60})


async def test_shut_down_answers_every_caller_before_the_tools_end(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    gateway = ToolGateway(store)
    await gateway.start()
    port = FakePort()
    effect = tool_body("effect", SLEEP, parameters=SLEEP_PARAMS, side_effect=True, idempotent=False)
    await register(gateway, effect)
    await register(gateway, tool_body("wait", SLEEP, parameters=SLEEP_PARAMS))
    written = asyncio.create_task(call(gateway, port, "effect", {"seconds": 2}, node="w"))
    read = asyncio.create_task(call(gateway, port, "wait", {"seconds": 30}, node="r"))
    while len(gateway.running()) < 2:
        await asyncio.sleep(0.01)
    stopped_at = time.monotonic()
    gateway.shut_down()
    answers = await asyncio.gather(written, read, return_exceptions=True)
    answered_in = time.monotonic() - stopped_at
    assert answered_in < SHUTDOWN_ANSWER_S + 0.5  # not the tools' 2 s or 30 s
    for answer in answers:
        assert isinstance(answer, ShuttingDown)
        assert answer.status == 503
        assert answer.extra["retryable"] is True
        assert answer.headers["Retry-After"]
    with pytest.raises(ShuttingDown):  # a call arriving now is refused, nothing runs
        await call(gateway, port, "wait", {"seconds": 0}, node="late")
    assert gateway.runner.executions == 2
    await gateway.close()  # the side effect runs on to its commit
    repo = store.repo
    effect_intent = repo.get_intent(make_tool_call_id("p1", "w", 1))
    read_intent = repo.get_intent(make_tool_call_id("p1", "r", 1))
    store.close()
    assert effect_intent is not None
    assert effect_intent.state is IntentState.COMMITTED
    assert read_intent is not None
    assert read_intent.state is IntentState.RETRYABLE


async def test_a_call_in_flight_costs_no_watcher_task_of_its_own(tmp_path: Path) -> None:
    """Every caller waits for its tool and for the server's stop on one future shared by all
    of them: a call in flight is its caller's task, its execution's and its tool's, no more
    (a watcher task per call would be one more for the stop to wake and collect)."""
    store = Store.open(tmp_path / "s.duckdb")
    gateway = ToolGateway(store)
    await gateway.start()
    port = FakePort()
    await register(gateway, tool_body("wait", SLEEP, parameters=SLEEP_PARAMS))
    idle = len(asyncio.all_tasks())
    calls = [
        asyncio.create_task(call(gateway, port, "wait", {"seconds": 30}, node=f"n{i}"))
        for i in range(3)
    ]
    while len(gateway.running()) < len(calls):
        await asyncio.sleep(0.01)
    assert len(asyncio.all_tasks()) - idle == 3 * len(calls)
    gateway.shut_down()
    answers = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(answer, ShuttingDown) for answer in answers), answers
    await gateway.close()
    store.close()
