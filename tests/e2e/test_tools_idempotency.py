"""T2b over real HTTP: duplicate delivery of side-effecting tool calls to a live server on a
real DuckDB file. Applied effects are counted in the ledger file the tool writes."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentconsole.server.gateway.builtin_tools import read_ledger
from tests.server.gateway.helpers import LEDGER_PARAMS
from tests.server.gateway.spawn import ServerProcess, served

pytestmark = pytest.mark.e2e
OPERATOR = {"Authorization": "Bearer sk-operator"}
TENANT = {"Authorization": "Bearer sk-tenant-a"}
KEYS, COPIES = 100, 10


@pytest.fixture(scope="module", params=["mini", "real"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The gateway in the minimal test app, then in the real app (simulated runtime)."""
    ledger = {
        "name": "ledger",
        "parameters": LEDGER_PARAMS,
        "side_effect": True,
        "idempotent": False,
        "executor": {"type": "builtin", "name": "ledger"},
    }
    yield from served(request, tmp_path_factory, [ledger])


def _call(node: int, amount: int) -> dict[str, Any]:
    return {
        "program_id": "idem",
        "node_id": f"n{node}",
        "arguments": {"account": f"acct-{node}", "amount": amount},
    }


async def _send_all(base_url: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=200)
    async with httpx.AsyncClient(base_url=base_url, headers=TENANT, limits=limits, timeout=60) as c:
        return await asyncio.gather(*(c.post("/v1/tools/ledger/call", json=b) for b in bodies))


def test_100_keys_times_10_concurrent_calls_execute_exactly_once_each(
    server: ServerProcess,
) -> None:
    bodies = [_call(k, k + 1) for k in range(KEYS) for _ in range(COPIES)]
    random.Random(7).shuffle(bodies)
    responses = asyncio.run(_send_all(server.base_url, bodies))
    assert Counter(r.status_code for r in responses) == {200: KEYS * COPIES}
    by_key: dict[str, list[dict[str, Any]]] = {}
    for response in responses:
        payload = response.json()
        by_key.setdefault(payload["tool_call_id"], []).append(payload)
    assert len(by_key) == KEYS
    for answers in by_key.values():
        assert sorted(a["status"] for a in answers) == ["committed"] + ["replayed"] * (COPIES - 1)
        assert len({str(a["result"]) for a in answers}) == 1
    rows = read_ledger(server.ledger)
    assert Counter(str(r["key"]) for r in rows) == dict.fromkeys(by_key, 1)
    committed = httpx.get(
        f"{server.base_url}/v1/operator/tool-calls",
        params={"state": "committed", "limit": 1000},
        headers=OPERATOR,
    ).json()["tool_calls"]
    assert {c["tool_call_id"] for c in committed} == set(by_key)


def test_same_keys_with_changed_arguments_are_422_with_zero_executions(
    server: ServerProcess,
) -> None:
    asyncio.run(_send_all(server.base_url, [_call(k, k + 1) for k in range(KEYS)]))
    before = len(read_ledger(server.ledger))
    changed = [_call(k, k + 2) for k in range(KEYS)]
    responses = asyncio.run(_send_all(server.base_url, changed))
    assert {r.status_code for r in responses} == {422}
    assert {r.json()["error"]["type"] for r in responses} == {"idempotency_mismatch"}
    assert len(read_ledger(server.ledger)) == before
