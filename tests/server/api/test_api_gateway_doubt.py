"""Side-effecting gateway calls in doubt, and calls that race a cancel, over real HTTP with the
simulated runtime and the real program service behind the gateway's port.

A call whose effect is in doubt (``needs_reconcile``) says what left it so, from what its
intent records: the executor timed out, the executor failed mid-call (its connection died),
or a crash interrupted it. Its retry answers the same ``needs_reconcile`` refusal whatever its
program's state: the agent of a cancelled or finished program must still learn that its
effect is in doubt, not that the program ended. A call whose program is cancelled while its
intent is claimed (after the gateway's checks, before the tool starts) is answered as a call
on the cancelled program, ``program_not_running``, never the port's generic ``conflict``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from agentconsole.server.gateway import GatewayConfig, GatewayExtension, ToolGateway
from agentconsole.server.gateway.runner import call_hash
from agentconsole.server.store import Claim, IntentState, ToolIntents, make_tool_call_id
from tests.server.api.harness import LiveServer, make_config
from tests.server.gateway.helpers import obj, tool_body

SLEEP = {"type": "builtin", "name": "sleep"}
SLEEP_PARAMS = obj(seconds={"type": "number", "minimum": 0, "maximum": 60})
ECHO = {"type": "builtin", "name": "echo"}
#: what every needs_reconcile answer ends with: the agent must not retry it
IN_DOUBT = "its effect may or may not have happened"


def _effect(name: str, executor: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A side-effecting tool without a downstream key: in doubt after a timeout or a death."""
    return tool_body(name, executor, side_effect=True, idempotent=False, **fields)


@contextmanager
def _server(db: Path) -> Iterator[tuple[LiveServer, ToolGateway]]:
    """A ready server with the gateway; loopback ``http`` executors allowed."""
    config = GatewayConfig(tenant_builtins=None, allow_private_executor_urls=True)
    extension = GatewayExtension(config)
    with LiveServer(make_config(db), extensions=[extension]) as live:
        live.wait_ready()
        assert extension.gateway is not None
        yield live, extension.gateway


class _Dying(ThreadingHTTPServer):
    """A loopback ``http`` executor that dies mid-call: it reads each request and hangs up
    without an answer, so the effect may have been applied."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _HangUp)
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/write"


class _HangUp(BaseHTTPRequestHandler):
    server: _Dying

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests += 1
        self.close_connection = True  # no status line: the client sees the connection drop

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _dying_executor() -> Iterator[_Dying]:
    served = _Dying()
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.shutdown()
        served.server_close()


def _refusal(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 409, answer.text
    error: dict[str, Any] = answer.json()["error"]
    return error


def _assert_in_doubt(answer: httpx.Response, cause: str) -> None:
    error = _refusal(answer)
    assert error["type"] == "needs_reconcile", error
    assert error["message"].startswith(cause), error["message"]
    assert IN_DOUBT in error["message"]
    if not cause.startswith("a crash"):  # the old answer said a crash, whatever happened
        assert "crash" not in error["message"]
    assert error["retryable"] is False


def test_a_timed_out_effect_says_so_and_its_retry_too_after_a_cancel(tmp_path: Path) -> None:
    with _server(tmp_path / "timeout.duckdb") as (live, _), live.client() as c:
        body = _effect("send", SLEEP, parameters=SLEEP_PARAMS, timeout_s=0.2)
        assert c.post("/v1/tools", json=body).status_code == 201
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        call = {"program_id": "p", "node_id": "t1", "arguments": {"seconds": 5}}
        first = c.post("/v1/tools/send/call", json=call)
        retry = c.post("/v1/tools/send/call", json=call)
        assert c.post("/v1/programs/p/cancel").status_code == 200
        after_cancel = c.post("/v1/tools/send/call", json=call)
        new_call = c.post("/v1/tools/send/call", json={**call, "node_id": "t2"})
    cause = "the executor timed out on this side-effecting call (no answer within 0.2 s)"
    for answer in (first, retry, after_cancel):
        _assert_in_doubt(answer, cause)
    # the program's end is the answer only to a call that has nothing in doubt
    assert _refusal(new_call)["type"] == "program_not_running"


def test_an_effect_whose_executor_died_says_so_after_its_program_finished(
    tmp_path: Path,
) -> None:
    with (
        _dying_executor() as executor,
        _server(tmp_path / "died.duckdb") as (live, _),
        live.client() as c,
    ):
        body = _effect("write", {"type": "http", "url": executor.url}, timeout_s=5.0)
        assert c.post("/v1/tools", json=body).status_code == 201
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        call = {"program_id": "p", "node_id": "t1", "arguments": {"text": "x"}}
        first = c.post("/v1/tools/write/call", json=call)
        retry = c.post("/v1/tools/write/call", json=call)
        finish = c.post("/v1/programs/p/finish", json={"success": True})
        assert finish.status_code == 200, finish.text
        after_finish = c.post("/v1/tools/write/call", json=call)
    assert executor.requests == 1  # reached once, never re-run
    for answer in (first, retry, after_finish):
        _assert_in_doubt(answer, "the executor failed mid-call on this side-effecting call")
        assert "tool request failed" in answer.json()["error"]["message"]


def test_an_effect_a_crash_interrupted_says_so_after_the_restart(tmp_path: Path) -> None:
    """What ``kill -9`` during the executor leaves: the intent in progress (durable before the
    tool starts), which start-up recovery marks ``needs_reconcile`` with nothing recorded of
    how it ended; the program is cancelled after the restart, and the retry still hears it."""
    db = tmp_path / "crash.duckdb"
    key = make_tool_call_id("p", "t1", 1)
    call = {"program_id": "p", "node_id": "t1", "arguments": {"text": "x"}}
    with _server(db) as (live, gateway), live.client() as c:
        assert c.post("/v1/tools", json=_effect("write", ECHO)).status_code == 201
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        (tool,) = gateway.tools("tenant-a", operator=False)
        params = call_hash(tool, {"text": "x"})
        claim = live.live.store.intents.claim(
            key, params, "p", "t1", "write", side_effect=True, idempotent=False
        )
        assert claim.result(10).execute  # the intent is in progress; the server stops
    with _server(db) as (live, _), live.client() as c:
        record = live.live.store.repo.get_intent(key)
        assert record is not None
        assert record.state is IntentState.NEEDS_RECONCILE
        retry = c.post("/v1/tools/write/call", json=call)
        assert c.post("/v1/programs/p/cancel").status_code == 200
        after_cancel = c.post("/v1/tools/write/call", json=call)
    for answer in (retry, after_cancel):
        _assert_in_doubt(answer, "a crash interrupted this side-effecting call")


class _CancelWhileClaiming:
    """The gateway's intents with a cancel of the claimed call's program landing while the
    claim commits: after every check of the gateway's pipeline, before the tool starts (the
    window where a cancel races a call, deterministic here)."""

    def __init__(self, intents: ToolIntents, live: LiveServer) -> None:
        self._intents = intents
        self._live = live
        self._tasks: set[asyncio.Task[None]] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._intents, name)

    def claim(self, tool_call_id: str, *args: Any, **kwargs: Any) -> Future[Claim]:
        program_id = str(args[1])
        claimed: Future[Claim] = Future()

        async def cancel_then_claim() -> None:
            try:
                await self._live.live.service.cancel_program(None, program_id)
                claim = self._intents.claim(tool_call_id, *args, **kwargs)
                claimed.set_result(await asyncio.wrap_future(claim))
            except BaseException as error:
                claimed.set_exception(error)

        task = asyncio.get_running_loop().create_task(cancel_then_claim())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return claimed


def test_a_call_that_races_a_cancel_is_refused_as_not_running(tmp_path: Path) -> None:
    with _server(tmp_path / "race.duckdb") as (live, gateway), live.client() as c:
        assert c.post("/v1/tools", json=tool_body("echo", ECHO)).status_code == 201
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        racing = _CancelWhileClaiming(gateway.runner.intents, live)
        gateway.runner.intents = cast(ToolIntents, racing)
        call = {"program_id": "p", "node_id": "t1", "arguments": {"text": "x"}}
        raced = c.post("/v1/tools/echo/call", json=call)
        state = c.get("/v1/programs/p").json()["state"]
        ended = c.post("/v1/tools/echo/call", json={**call, "node_id": "t2"})
        record = live.live.store.repo.get_intent(make_tool_call_id("p", "t1", 1))
    assert state == "cancelled"
    error = _refusal(raced)
    assert error["type"] == "program_not_running", error
    # the same answer as a call that arrives once the program has ended
    assert (raced.status_code, error["type"]) == (ended.status_code, _refusal(ended)["type"])
    assert raced.headers.get("x-should-retry") == ended.headers.get("x-should-retry")
    assert gateway.runner.executions == 0  # the tool never ran
    assert record is not None
    assert record.state is IntentState.RETRYABLE  # nothing ran: the same key may run later


@pytest.mark.parametrize("end", ["cancel", "finish"])
def test_boost_and_preempt_of_an_ended_program_are_refused_as_a_pin(
    tmp_path: Path, end: str
) -> None:
    with _server(tmp_path / "ops.duckdb") as (live, _):
        with live.client() as c:
            assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
            body = {"success": True} if end == "finish" else None
            assert c.post(f"/v1/programs/p/{end}", json=body).status_code == 200
        with live.client("sk-operator") as op:
            model = op.get("/v1/models").json()["data"][0]["id"]
            pin = op.post("/v1/operator/models/pins", json={"program_id": "p", "model": model})
            boost = op.post("/v1/operator/programs/p/boost", json={"amount": 5})
            preempt = op.post("/v1/operator/programs/p/preempt")
            audit = op.get("/v1/operator/audit", params={"target": "p", "limit": 50})
    expected = _refusal(pin)
    assert expected["type"] == "program_not_running"
    for answer in (boost, preempt):
        assert _refusal(answer) == expected, answer.text
    results = {row["action"]: row["result"] for row in audit.json()["actions"]}
    for action in ("boost", "preempt", "pin_model"):
        assert results[action].startswith("refused"), results
