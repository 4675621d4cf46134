"""``Idempotency-Key`` on ``POST /v1/programs``: a create retried with the same key and body is
answered 201 with the program the first one opened (in memory, ended, after a restart), never
a second program nor 409; the same key with another body is 422 ``idempotency_mismatch`` and
opens nothing; keys are per tenant; concurrent duplicates open one program; a malformed key is
422 ``invalid_request`` naming the header. A create without a key is unchanged (the other
program tests)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.api.createkeys import request_sha256
from agentconsole.server.api.schemas import ProgramCreate
from agentconsole.server.store.idempotency import IdempotencyKeyRecord
from tests.server.api.harness import OPERATOR, LiveServer, make_config
from tests.server.api.test_api_retry_after_refusal import FillingDisk

KEY = "Idempotency-Key"


def _created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _total(client: httpx.Client, label: str) -> int:
    """How many of the caller's programs carry ``label`` (``key:value``)."""
    listing = client.get("/v1/programs", params={"label": label})
    assert listing.status_code == 200, listing.text
    total: int = listing.json()["total"]
    return total


def _create(client: httpx.Client, key: str, body: dict[str, Any]) -> httpx.Response:
    return client.post("/v1/programs", json=body, headers={KEY: key})


@pytest.mark.parametrize("named", [False, True], ids=["server-chosen id", "named id"])
def test_a_retry_with_the_same_key_and_body_gets_the_same_program(
    server: LiveServer, named: bool
) -> None:
    label = f"retry-{named}"
    body: dict[str, Any] = {"labels": {"case": label}, "deadline_s": 600}
    if named:
        body["program_id"] = "idem-named"
    with server.client() as a:
        first = _created(_create(a, f"key-{label}", body))
        again = _created(_create(a, f"key-{label}", body))
        assert again["program_id"] == first["program_id"]
        assert again["tenant"] == "tenant-a"
        assert again["labels"] == {"case": label}
        assert _total(a, f"case:{label}") == 1
        # the program as it is now: ended, the retry still answers it (201, the first's status)
        assert a.post(f"/v1/programs/{first['program_id']}/finish").status_code == 200
        ended = _created(_create(a, f"key-{label}", body))
        assert (ended["program_id"], ended["state"]) == (first["program_id"], "finished")
        assert _total(a, f"case:{label}") == 1
        # another key is another create
        other = _create(a, f"key-{label}-2", body)
        if named:
            assert other.status_code == 409, other.text
        else:
            assert _created(other)["program_id"] != first["program_id"]


def test_the_same_key_with_another_body_is_refused_and_opens_nothing(server: LiveServer) -> None:
    body = {"labels": {"case": "mismatch"}}
    with server.client() as a:
        first = _created(_create(a, "key-mismatch", body))
        for other in (
            {"labels": {"case": "mismatch", "more": "x"}},
            {**body, "deadline_s": 60},
            {**body, "program_id": "idem-mismatch"},
            {},
        ):
            refused = _create(a, "key-mismatch", other)
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert (error["type"], error["field"]) == ("idempotency_mismatch", KEY)
            assert refused.headers["x-should-retry"] == "false"
        assert a.get("/v1/programs/idem-mismatch").status_code == 404
        assert _total(a, "case:mismatch") == 1
        assert _created(_create(a, "key-mismatch", body))["program_id"] == first["program_id"]


def test_keys_are_per_tenant(server: LiveServer) -> None:
    body = {"labels": {"case": "tenants"}}
    with server.client() as a, server.client("sk-b") as b:
        mine = _created(_create(a, "key-shared", body))
        # another tenant's same key and body: its own program, as with no key at all
        theirs = _created(_create(b, "key-shared", body))
        assert theirs["program_id"] != mine["program_id"]
        assert theirs["tenant"] == "tenant-b"
        # and another body is no mismatch for it: the keys are not the same key
        _created(_create(b, "key-shared-2", {"labels": {"case": "tenants", "b": "1"}}))
        assert _created(_create(a, "key-shared", body))["program_id"] == mine["program_id"]
        assert _created(_create(b, "key-shared", body))["program_id"] == theirs["program_id"]
        assert _total(a, "case:tenants") == 1
        assert _total(b, "case:tenants") == 2


def test_an_operator_key_creates_under_its_tenant_with_its_keys(server: LiveServer) -> None:
    body = {"labels": {"case": "operator"}}
    with server.client(OPERATOR) as op, server.client() as a:
        first = _created(_create(op, "key-op", body))
        assert _created(_create(op, "key-op", body))["program_id"] == first["program_id"]
        # the tenant's same key is the tenant's own
        assert _created(_create(a, "key-op", body))["program_id"] != first["program_id"]


def test_concurrent_creates_with_one_key_open_one_program(tmp_path: Path) -> None:
    """On a fresh server, so the first creates also meet the first read of the stored keys
    (an await inside the lookup), as well as the named id's check in the store."""
    with LiveServer(make_config(tmp_path / "idem-concurrent.duckdb")) as fresh:
        fresh.wait_ready()
        with fresh.client() as a, ThreadPoolExecutor(max_workers=8) as pool:
            for label, body in (
                ("chosen", {"labels": {"case": "chosen"}}),
                ("named", {"program_id": "idem-concurrent", "labels": {"case": "named"}}),
            ):
                key = f"key-{label}"
                answers = list(pool.map(lambda _, k=key, b=body: _create(a, k, b), range(16)))
                ids = {_created(answer)["program_id"] for answer in answers}
                assert len(ids) == 1, label
                assert _total(a, f"case:{label}") == 1


@pytest.mark.parametrize(
    "bad",
    [b"", b"has space", b"x" * 256, "cl\u00e9".encode(), b"tab\there"],
    ids=["empty", "space", "too long", "not ascii", "tab"],
)
def test_a_malformed_key_is_refused(server: LiveServer, bad: bytes) -> None:
    with server.client() as a:
        headers = {KEY.encode(): bad}
        refused = a.post("/v1/programs", json={"labels": {"case": "bad"}}, headers=headers)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["type"] == "invalid_request"
        assert error["field"] == KEY
        assert _total(a, "case:bad") == 0
        # 255 visible ASCII characters are a key
        _created(_create(a, "~" * 255, {"labels": {"case": "long"}}))


class _FillingOnCreate(FillingDisk):
    """:class:`FillingDisk` on the next creation of any program (its id chosen by the server)."""

    def _observe(self, event: Event) -> None:
        if self._when is not None and self._when[0] is event.kind:
            self._when = (event.kind, event.program_id)
        super()._observe(event)


def test_a_keyed_create_refused_503_after_it_opened_is_answered_on_retry(tmp_path: Path) -> None:
    """The disk fills between the write gate and the commit the answer waits for: 503, the
    program open in memory. A retry with the key gets that program once it commits, where a
    retry of a server-chosen id without a key opens a second program."""
    with LiveServer(make_config(tmp_path / "idem-503.duckdb")) as server:
        server.wait_ready()
        disk = _FillingOnCreate(server)
        body = {"labels": {"case": "refused"}}
        with server.client() as a, server.client(None) as anon:
            disk.fill_on(EventKind.PROGRAM_CREATED, "")  # whatever id the server chooses
            first = _create(a, "key-refused", body)
            assert first.status_code == 503, first.text
            assert disk.filled
            again = _create(a, "key-refused", body)  # still full: 503 again, nothing opened
            assert again.status_code == 503, again.text
            disk.free(anon)
            retried = _created(_create(a, "key-refused", body))
            assert _created(_create(a, "key-refused", body))["program_id"] == retried["program_id"]
            assert _total(a, "case:refused") == 1


def test_a_key_whose_program_never_committed_opens_one(tmp_path: Path) -> None:
    """A crash between the two files' commits can leave a key without its program: the retry
    (its client was never answered) opens the program, and the key answers it from then on;
    another body is still refused."""
    db = tmp_path / "idem-ghost.duckdb"
    body = {"labels": {"case": "ghost"}}
    digest = request_sha256(ProgramCreate.model_validate(body))
    ghost = IdempotencyKeyRecord("tenant-a", "key-ghost", "never-opened", digest, 1.0)
    with LiveServer(make_config(db)) as first:
        first.wait_ready()
        first.run(_put_durable(first, ghost))  # as the crashed server's create left it
    with LiveServer(make_config(db)) as second, second.client() as a:
        second.wait_ready()
        refused = _create(a, "key-ghost", {"labels": {"case": "ghost", "other": "body"}})
        assert refused.status_code == 422, refused.text
        opened = _created(_create(a, "key-ghost", body))
        assert opened["program_id"] != "never-opened"
        assert _created(_create(a, "key-ghost", body))["program_id"] == opened["program_id"]
        assert _total(a, "case:ghost") == 1
        assert a.get("/v1/programs/never-opened").status_code == 404


async def _put_durable(server: LiveServer, record: IdempotencyKeyRecord) -> None:
    await asyncio.wrap_future(server.live.store.writer.put_durable(record))


def test_keys_answer_after_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "idem-restart.duckdb"
    running = {"labels": {"case": "restart-running"}}
    ended = {"program_id": "idem-ended", "labels": {"case": "restart-ended"}}
    with LiveServer(make_config(db)) as first, first.client() as a:
        first.wait_ready()
        before = _created(_create(a, "key-running", running))
        _created(_create(a, "key-ended", ended))
        assert a.post("/v1/programs/idem-ended/finish").status_code == 200
    with LiveServer(make_config(db)) as second:
        second.wait_ready()
        with second.client() as a, second.client("sk-b") as b:
            after = _created(_create(a, "key-running", running))
            assert (after["program_id"], after["state"]) == (before["program_id"], "running")
            assert _total(a, "case:restart-running") == 1
            finished = _created(_create(a, "key-ended", ended))
            assert (finished["program_id"], finished["state"]) == ("idem-ended", "finished")
            mismatch = _create(a, "key-running", ended)
            assert mismatch.status_code == 422, mismatch.text
            assert mismatch.json()["error"]["type"] == "idempotency_mismatch"
            # another tenant's same key is still its own create
            theirs = _created(_create(b, "key-running", running))
            assert theirs["program_id"] != before["program_id"]
            # a new key after the restart: a new program (the stored keys rule it out)
            fresh = _created(_create(a, "key-fresh", running))
            assert fresh["program_id"] != before["program_id"]
            assert _total(a, "case:restart-running") == 2


def test_the_header_is_in_the_contract(server: LiveServer) -> None:
    with server.client(None) as anon:
        schema = anon.get("/schema/openapi.json").json()
    parameters = schema["paths"]["/v1/programs"]["post"]["parameters"]
    (header,) = [p for p in parameters if p["name"] == KEY]
    assert header["in"] == "header"
    assert header["required"] is False
    assert header["schema"]["type"] == "string"
    assert header["schema"]["pattern"] == "^[!-~]{1,255}$"
    assert header["schema"]["maxLength"] == 255
