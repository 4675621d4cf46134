"""A state change the store refused to commit after it took effect in memory (the disk filled
between the write gate and the flush the answer waits for; or, with an operator key, between
that flush and the audit row) is answered 503 ``x-should-retry: true``: the client retries,
and the retry must get the answer the first attempt would have had, not a refusal the first
attempt caused.

A create did not: its retry met the program the refused attempt had opened and was told 409
"already exists", so a well-behaved client took the program it created for someone else's.
Now a create repeated by the same tenant with the same body, for the program a refused
create opened, is answered as that create would have been (201 once its rows commit, 503
while the store still cannot); another tenant, another body, or a create of a program whose
creation was answered 201 still gets 409. Finish and cancel were already honest (each is
idempotent), and so is a node's declaration (the same node declared the same way); an agent's
tool start report is now answered `running` on its retry, and keeps the first start's time.

The disk fills at an exact point of the request: a hub subscriber, called as the state change
emits its event, makes both lanes' commits fail as on a full disk and waits until the store
holds its rows, so the request's own next commit (its flush, or the operator's audit row) is
refused.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.program import Program
from agentconsole.server.api.refusedcreates import RefusedCreates, create_request
from agentconsole.server.api.schemas import ProgramCreate
from agentconsole.server.gateway.config import GatewayConfig
from agentconsole.server.gateway.extension import GatewayExtension
from tests.server.api.harness import OPERATOR, LiveServer, gateway_server, make_config, wait_until
from tests.server.store.test_store_storage_full import NO_SPACE, RefusingCommits, refuse_commits

BODY: dict[str, Any] = {"program_id": "cr-1", "labels": {"team": "search"}, "deadline_s": 600}


class FillingDisk:
    """Both lanes of ``server``'s store writer behind commits that fail as on a full disk once
    :meth:`fill_on`'s event is emitted (not before: the request passes the write gate)."""

    def __init__(self, server: LiveServer) -> None:
        self._writer = server.live.store.writer
        self._lanes: list[RefusingCommits] = [
            refuse_commits(lane, lambda: duckdb.TransactionException(NO_SPACE))
            for lane in (self._writer._main, self._writer._events)
        ]
        self._when: tuple[EventKind, str] | None = None
        self.filled = False
        server.live.hub.subscribe(self._observe)

    def fill_on(self, kind: EventKind, program_id: str) -> None:
        self._when = (kind, program_id)

    def _observe(self, event: Event) -> None:
        # on the server's loop, inside the request that emitted ``event``: blocking it here is
        # the point (the lane's own thread makes the refused commit meanwhile)
        if self._when != (event.kind, event.program_id):
            return
        self._when = None
        for lane in self._lanes:
            lane.refusing.set()
        self._writer.flush(events=False)  # a commit the disk refuses: the main lane holds
        deadline = time.monotonic() + 10
        while not self._writer._main.holding and time.monotonic() < deadline:
            time.sleep(0.005)
        self.filled = self._writer._main.holding

    def free(self, anon: httpx.Client) -> None:
        """Room again: the held rows commit and the server is ready."""
        for lane in self._lanes:
            lane.refusing.clear()
        wait_until(lambda: anon.get("/ready").status_code == 200)


def _refused_as_retryable(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["x-should-retry"] == "true"


def test_a_create_retried_after_its_503_gets_the_program_it_created(tmp_path: Path) -> None:
    db = tmp_path / "retry.duckdb"
    with LiveServer(make_config(db)) as server:
        server.wait_ready()
        disk = FillingDisk(server)
        with server.client() as a, server.client("sk-b") as b, server.client(None) as anon:
            disk.fill_on(EventKind.PROGRAM_CREATED, "cr-1")
            _refused_as_retryable(a.post("/v1/programs", json=BODY))
            assert disk.filled
            # the refused attempt did open it (the trap: a retry meets it)
            assert a.get("/v1/programs/cr-1").status_code == 200
            _refused_as_retryable(a.post("/v1/programs", json=BODY))  # still full: 503 again

            disk.free(anon)
            # not the request that was refused: told the id is taken, as before
            taken = b.post("/v1/programs", json=BODY)
            assert taken.status_code == 409, taken.text
            other_body = a.post("/v1/programs", json={**BODY, "labels": {"team": "ads"}})
            assert other_body.status_code == 409, other_body.text
            assert a.post("/v1/programs", json={"program_id": "cr-1"}).status_code == 409

            retried = a.post("/v1/programs", json=BODY)
            assert retried.status_code == 201, retried.text
            program = retried.json()
            assert program["program_id"] == "cr-1"
            assert program["tenant"] == "tenant-a"
            assert program["state"] == "running"
            assert program["labels"] == {"team": "search"}
            # answered 201 once: from now on the program's creation was acknowledged
            assert a.post("/v1/programs", json=BODY).status_code == 409
    with LiveServer(make_config(db)) as again, again.client() as a, again.client("sk-b") as b:
        again.wait_ready()
        assert a.get("/v1/programs/cr-1").status_code == 200
        assert b.get("/v1/programs/cr-1").status_code == 404


def test_an_operator_create_whose_audit_row_was_refused_is_answered_on_retry(
    tmp_path: Path,
) -> None:
    """With an operator key the program's rows commit, then its audit row is refused: the
    answer is 503 for a program that is in the store already."""
    with LiveServer(make_config(tmp_path / "op.duckdb")) as server:
        server.wait_ready()
        disk = FillingDisk(server)
        body = {"program_id": "cr-op"}
        with server.client(OPERATOR) as op, server.client(None) as anon:
            disk.fill_on(EventKind.OPERATOR_ACTION, "cr-op")
            _refused_as_retryable(op.post("/v1/programs", json=body))
            assert disk.filled
            disk.free(anon)
            retried = op.post("/v1/programs", json=body)
            assert retried.status_code == 201, retried.text
            assert retried.json()["program_id"] == "cr-op"
            assert op.post("/v1/programs", json=body).status_code == 409


@pytest.mark.parametrize(
    ("verb", "kind", "state"),
    [
        ("finish", EventKind.PROGRAM_FINISHED, "finished"),
        ("cancel", EventKind.PROGRAM_CANCELLED, "cancelled"),
    ],
)
@pytest.mark.parametrize("key", ["sk-a", OPERATOR], ids=["tenant", "operator"])
def test_a_finish_or_cancel_retried_after_its_503_is_answered_as_done(
    tmp_path: Path, verb: str, kind: EventKind, state: str, key: str
) -> None:
    """Not a trap: both are idempotent, so their retry answers 200 with the state the refused
    attempt set (checked here so that stays so)."""
    with LiveServer(make_config(tmp_path / "end.duckdb")) as server:
        server.wait_ready()
        disk = FillingDisk(server)
        with server.client() as a, server.client(key) as c, server.client(None) as anon:
            assert a.post("/v1/programs", json={"program_id": "cr-end"}).status_code == 201
            disk.fill_on(kind, "cr-end")
            _refused_as_retryable(c.post(f"/v1/programs/cr-end/{verb}"))
            assert disk.filled
            disk.free(anon)
            retried = c.post(f"/v1/programs/cr-end/{verb}")
            assert retried.status_code == 200, retried.text
            assert retried.json()["state"] == state


@pytest.mark.parametrize("key", ["sk-a", OPERATOR], ids=["tenant", "operator"])
def test_a_declaration_retried_after_its_503_is_answered_with_its_node(
    tmp_path: Path, key: str
) -> None:
    """The node the refused declaration added is answered on the retry, not 409."""
    with LiveServer(make_config(tmp_path / "node.duckdb")) as server:
        server.wait_ready()
        disk = FillingDisk(server)
        with server.client() as a, server.client(key) as c, server.client(None) as anon:
            assert a.post("/v1/programs", json={"program_id": "cr-node"}).status_code == 201
            ahead = {"node_id": "n1", "kind": "llm", "parents": []}
            disk.fill_on(EventKind.NODE_ADDED, "cr-node")
            _refused_as_retryable(c.post("/v1/programs/cr-node/nodes", json=ahead))
            assert disk.filled
            disk.free(anon)
            retried = c.post("/v1/programs/cr-node/nodes", json=ahead)
            assert retried.status_code == 201, retried.text
            assert retried.json()["node_id"] == "n1"


def test_a_tool_start_report_retried_after_its_503_is_answered_as_running(
    tmp_path: Path,
) -> None:
    with gateway_server(tmp_path / "tool.duckdb") as server:
        disk = FillingDisk(server)
        with server.client() as a, server.client(None) as anon:
            assert a.post("/v1/programs", json={"program_id": "cr-tool"}).status_code == 201
            start = {"node_id": "t1", "tool": "grep"}
            disk.fill_on(EventKind.TOOL_STARTED, "cr-tool")
            started = time.monotonic()
            _refused_as_retryable(a.post("/v1/programs/cr-tool/tool-calls/start", json=start))
            assert disk.filled
            disk.free(anon)
            time.sleep(0.5)  # the tool runs on while the agent waits to retry
            retried = a.post("/v1/programs/cr-tool/tool-calls/start", json=start)
            assert retried.status_code == 200, retried.text
            assert retried.json()["state"] == "running"
            # once answered, a start of the running node is a second start again
            again = a.post("/v1/programs/cr-tool/tool-calls/start", json=start)
            assert again.status_code == 409, again.text
            finish = {"node_id": "t1", "outcome": "ok"}
            finished = a.post("/v1/programs/cr-tool/tool-calls/finish", json=finish)
            ran_s = time.monotonic() - started
            assert finished.status_code == 200, finished.text
        # measured from the first start, which took effect: not from its retry
        assert ran_s >= finished.json()["latency_s"] >= 0.5


def test_a_start_while_the_first_start_waits_for_its_commit_is_a_second_start(
    tmp_path: Path,
) -> None:
    """Only a start whose answer was refused is retried: a concurrent start of the same node
    while the first waits for its commit (a slow disk) is still told 409, so one tool does not
    run twice."""
    gateway = GatewayExtension(GatewayConfig(tenant_builtins=None))
    with LiveServer(make_config(tmp_path / "two.duckdb"), extensions=[gateway]) as server:
        server.wait_ready()
        assert gateway.gateway is not None
        reports = gateway.gateway.reports
        commit = reports._committed
        waiting = threading.Event()

        async def slow_first_commit() -> None:
            if not waiting.is_set():
                waiting.set()
                await asyncio.sleep(0.8)
            await commit()

        reports._committed = slow_first_commit
        start = {"node_id": "t1", "tool": "grep"}
        path = "/v1/programs/cr-two/tool-calls/start"
        with server.client() as a, server.client() as b, ThreadPoolExecutor(1) as pool:
            assert a.post("/v1/programs", json={"program_id": "cr-two"}).status_code == 201
            first = pool.submit(a.post, path, json=start)
            assert waiting.wait(10)  # the first start is waiting for its commit
            second = b.post(path, json=start)
            assert first.result(timeout=10).status_code == 200
        assert second.status_code == 409, second.text


def test_only_the_program_the_refused_create_opened_is_its_retrys() -> None:
    """The entry names one program (its creation time): a later program under the same id, once
    the first left memory, is not the refused create's; and the oldest entries go first."""
    refused = RefusedCreates(limit=2)
    request = create_request(ProgramCreate.model_validate(BODY))
    first = Program("cr-1", "tenant-a", 100.0)
    refused.remember(first, request)
    assert refused.is_retry(first, "tenant-a", request)
    assert not refused.is_retry(Program("cr-1", "tenant-a", 200.0), "tenant-a", request)
    assert not refused.is_retry(first, "tenant-b", request)
    refused.remember(Program("cr-2", "tenant-a", 101.0), request)
    refused.remember(Program("cr-3", "tenant-a", 102.0), request)
    assert len(refused) == 2
    assert not refused.is_retry(first, "tenant-a", request)
    refused.answered("cr-2")
    assert len(refused) == 1
