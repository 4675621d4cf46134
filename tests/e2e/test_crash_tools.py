"""T2 over real HTTP: kill -9 of the server during side-effecting tool calls, then restart.

Each trial runs a fresh server on a real DuckDB file with the ``ledger`` tool (a side effect
with no downstream key, registered non-idempotent) and the ``keyed_ledger`` tool (the same
downstream honouring the ``Idempotency-Key``, registered idempotent). The server dies at a
named crash point (``AGENTCONSOLE_CRASH_AT``) or by a SIGKILL at a random moment. After the
restart every call is retried with the same key, and the ledger file (fsynced before the
result is committed) says what was applied:

* reopen succeeds; no intent is left ``in_progress``;
* every call acknowledged before the crash replays the same result (no lost commit);
* ``ledger``: at most one applied effect per key; a call in doubt answers 409
  ``needs_reconcile``, is listed for operators and is not re-run by the retry;
* ``keyed_ledger``: re-executed with the same key when in doubt, applied exactly once.

Trials run on the real app (``server.app`` + the gateway extension, simulated runtime); the
deterministic ones on the minimal test app as well.
"""

from __future__ import annotations

import asyncio
import random
import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.server.gateway.builtin_tools import read_ledger
from agentconsole.server.store import make_tool_call_id
from agentconsole.server.store.crash import ENV_VAR
from tests.server.gateway.helpers import LEDGER_PARAMS
from tests.server.gateway.spawn import ServerProcess

pytestmark = pytest.mark.e2e
OPERATOR = {"Authorization": "Bearer sk-operator"}
TENANT = {"Authorization": "Bearer sk-tenant-a"}
POINTS = (
    "before_intent_commit",
    "after_intent_commit",
    "after_external_call",
    "before_result_commit",
    "after_result_commit_before_ack",
)
PLAIN, KEYED = "ledger", "keyed_ledger"


@dataclass(slots=True)
class Sent:
    """One call and what the client saw (``status`` None: no answer, the server died)."""

    tool: str
    program_id: str
    node_id: str
    amount: int
    status: int | None = None
    payload: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        return make_tool_call_id(self.program_id, self.node_id, 1)

    def body(self) -> dict[str, Any]:
        arguments = {"account": self.program_id.lower(), "amount": self.amount}
        return {"program_id": self.program_id, "node_id": self.node_id, "arguments": arguments}


def _register(base_url: str) -> None:
    with httpx.Client(base_url=base_url, headers=OPERATOR) as client:
        for name, idempotent in ((PLAIN, False), (KEYED, True)):
            body = {
                "name": name,
                "parameters": LEDGER_PARAMS,
                "side_effect": True,
                "idempotent": idempotent,
                "executor": {"type": "builtin", "name": name},
            }
            assert client.post("/v1/tools", json=body).status_code == 201


async def _send(client: httpx.AsyncClient, sent: Sent) -> bool:
    try:
        response = await client.post(f"/v1/tools/{sent.tool}/call", json=sent.body())
    except httpx.HTTPError:
        return False
    sent.status, sent.payload = response.status_code, response.json()
    return True


async def _program(client: httpx.AsyncClient, calls: list[Sent]) -> None:
    for sent in calls:
        if not await _send(client, sent):
            return


async def _drive(base_url: str, first: str | None, kill_after: float | None,
                 server: ServerProcess) -> list[Sent]:  # fmt: skip
    """The first call alone (when given), then 20 programs x 5 calls concurrently."""
    programs = [
        [Sent(PLAIN if (p + n) % 2 == 0 else KEYED, f"P{p}", f"n{n}", p * 10 + n + 1)
         for n in range(5)]
        for p in range(20)
    ]  # fmt: skip
    sent: list[Sent] = [Sent(first, "first", "n0", 7)] if first else []
    async with httpx.AsyncClient(base_url=base_url, headers=TENANT, timeout=20) as client:
        if sent and not await _send(client, sent[0]):
            return sent
        work = asyncio.gather(*(_program(client, calls) for calls in programs))
        if kill_after is not None:
            await asyncio.sleep(kill_after)
            server.kill()
        await work
    return sent + [s for calls in programs for s in calls]


def _applied(ledger: Path) -> tuple[Counter[str], Counter[str]]:
    """(applied effects, deliveries) per key."""
    rows = read_ledger(ledger)
    return Counter(str(r["key"]) for r in rows if r["applied"]), Counter(
        str(r["key"]) for r in rows
    )


@dataclass(slots=True)
class Verdict:
    """What the restart found, for the deterministic assertions of a trial."""

    retries: dict[str, Sent]
    needs_reconcile: set[str]
    applied: Counter[str]
    delivered: Counter[str]


def _restart_and_verify(server: ServerProcess, sent: list[Sent]) -> Verdict:
    applied_before, _ = _applied(server.ledger)
    server.start()
    retries = {s.key: Sent(s.tool, s.program_id, s.node_id, s.amount) for s in sent}

    async def retry_all() -> None:
        async with httpx.AsyncClient(base_url=server.base_url, headers=TENANT, timeout=20) as c:
            await asyncio.gather(*(_send(c, r) for r in retries.values()))

    asyncio.run(retry_all())
    listing = httpx.get(f"{server.base_url}/v1/operator/tool-calls",
                        params={"limit": 1000}, headers=OPERATOR).json()["tool_calls"]  # fmt: skip
    assert not [c for c in listing if c["state"] == "in_progress"]
    flagged = {c["tool_call_id"] for c in listing if c["state"] == "needs_reconcile"}
    applied, delivered = _applied(server.ledger)
    for original in sent:
        retry = retries[original.key]
        assert retry.payload is not None
        if original.status == 200:  # acknowledged: the commit survived and replays as is
            assert retry.status == 200
            assert retry.payload["status"] == "replayed"
            assert original.payload is not None
            assert retry.payload["result"] == original.payload["result"]
        assert applied[original.key] <= 1
        if original.tool == PLAIN and retry.status == 409:
            assert retry.payload["error"]["type"] == "needs_reconcile"
            assert original.key in flagged
            assert applied[original.key] == applied_before[original.key]  # not re-run
        elif original.status in (None, 200):
            assert retry.status == 200, retry.payload
            assert applied[original.key] == 1
    assert flagged == {k for k, r in retries.items() if r.status == 409}
    assert all(retries[k].tool == PLAIN for k in flagged)
    return Verdict(retries, flagged, applied, delivered)


def _trial(
    tmp: Path,
    crash_at: str | None,
    first: str | None = None,
    kill_after: float | None = None,
    *,
    real: bool = True,
) -> tuple[list[Sent], Verdict]:
    env = {ENV_VAR: crash_at} if crash_at else {}
    server = ServerProcess(tmp / "store.duckdb", tmp / "ledger.jsonl", env=env, real=real)
    server.start()
    _register(server.base_url)
    sent = asyncio.run(_drive(server.base_url, first, kill_after, server))
    assert server.wait(30) == -signal.SIGKILL
    server.env.pop(ENV_VAR, None)
    try:
        return sent, _restart_and_verify(server, sent)
    finally:
        server.stop()


@pytest.mark.parametrize("real", [False, True], ids=["mini", "real"])
@pytest.mark.parametrize("point", POINTS)
def test_crash_on_the_first_non_idempotent_call(tmp_path: Path, point: str, real: bool) -> None:
    sent, verdict = _trial(tmp_path, f"{point}:1", first=PLAIN, real=real)
    key = sent[0].key
    assert sent[0].status is None  # the server died before answering
    retry = verdict.retries[key]
    if point == "before_intent_commit":  # nothing durable, nothing ran: runs now, once
        assert retry.status == 200
        assert retry.payload is not None
        assert retry.payload["status"] == "committed"
        assert verdict.applied[key] == 1
    elif point == "after_result_commit_before_ack":  # committed, the ack was lost: replay
        assert retry.payload is not None
        assert retry.payload["status"] == "replayed"
        assert verdict.delivered[key] == 1
    else:  # in doubt: flagged, never re-run automatically
        assert verdict.needs_reconcile == {key}
        assert verdict.delivered[key] == (0 if point == "after_intent_commit" else 1)


@pytest.mark.parametrize("real", [False, True], ids=["mini", "real"])
@pytest.mark.parametrize("point", POINTS)
def test_crash_on_the_first_idempotent_call_re_executes_with_the_same_key(
    tmp_path: Path, point: str, real: bool
) -> None:
    sent, verdict = _trial(tmp_path, f"{point}:1", first=KEYED, real=real)
    key = sent[0].key
    retry = verdict.retries[key]
    assert retry.status == 200
    assert retry.payload is not None
    assert retry.payload["tool_call_id"] == key
    assert verdict.applied[key] == 1
    assert not verdict.needs_reconcile
    delivered_twice = point in ("after_external_call", "before_result_commit")
    assert verdict.delivered[key] == (2 if delivered_twice else 1)
    assert retry.payload["status"] == (
        "replayed" if point.startswith("after_result") else "committed"
    )


@pytest.mark.parametrize("point", POINTS)
def test_crash_under_load_keeps_every_invariant(tmp_path: Path, point: str) -> None:
    sent, verdict = _trial(tmp_path, f"{point}:4")
    assert any(s.status is None for s in sent)  # the crash cut calls off mid-load
    assert len(verdict.retries) == 100  # and every call was checked after the restart


@pytest.mark.parametrize("seed", range(4))
def test_random_sigkill_under_load_keeps_every_invariant(tmp_path: Path, seed: int) -> None:
    delay = random.Random(seed).uniform(0.05, 0.6)
    sent, verdict = _trial(tmp_path, None, kill_after=delay)
    assert len(verdict.retries) == len(sent)


def test_operator_reconcile_settles_a_call_in_doubt(tmp_path: Path) -> None:
    env = {ENV_VAR: "after_intent_commit:1"}
    server = ServerProcess(tmp_path / "store.duckdb", tmp_path / "ledger.jsonl", env=env, real=True)
    server.start()
    _register(server.base_url)
    doubt = Sent(PLAIN, "rec", "n1", 3)
    asyncio.run(_drive_one(server.base_url, doubt))
    assert server.wait(30) == -signal.SIGKILL
    server.env.pop(ENV_VAR)
    with server, httpx.Client(base_url=server.base_url, timeout=20) as client:
        url = f"/v1/tools/{PLAIN}/call"
        assert client.post(url, json=doubt.body(), headers=TENANT).status_code == 409
        reconcile = f"/v1/operator/tool-calls/{doubt.key}/reconcile"
        assert client.post(reconcile, json={"action": "retry"}, headers=TENANT).status_code == 403
        settled = client.post(reconcile, json={"action": "retry"}, headers=OPERATOR)
        assert settled.status_code == 200
        assert settled.json()["state"] == "retryable"
        again = client.post(url, json=doubt.body(), headers=TENANT)
        assert again.status_code == 200
        assert again.json()["status"] == "committed"
        assert client.post(reconcile, json={"action": "retry"}, headers=OPERATOR).status_code == 409
    assert _applied(server.ledger)[0][doubt.key] == 1


async def _drive_one(base_url: str, sent: Sent) -> None:
    async with httpx.AsyncClient(base_url=base_url, headers=TENANT, timeout=20) as client:
        await _send(client, sent)
