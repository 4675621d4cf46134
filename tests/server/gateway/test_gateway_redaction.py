"""Per-tenant redaction of tool data: with ``hash`` or ``none`` the store (and so replays and
exports) keeps no argument or result text; ``full`` keeps both and replays exactly."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import duckdb
import pytest

from agentconsole.server.gateway import GatewayConfig, ToolGateway
from agentconsole.server.gateway.errors import InvalidArguments
from agentconsole.server.gateway.redaction import digest
from agentconsole.server.store.export import export_parquet
from agentconsole.server.store.jsonutil import JSONValue
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import call, register_ledger, tool_body
from tests.server.gateway.mini_server import TENANT_A, TENANT_B, in_process

SECRET = "card 4111-1111-1111-1111"
# what no timestamp, digest or id can contain (a bare "4111" once matched a float timestamp)
SECRET_MARK = "4111-1111"


def _stored(db: Path) -> str:
    """Every argument and result the store keeps, as one text."""
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT i.arguments, r.result FROM tool_intents i"
            " LEFT JOIN tool_results r USING (tool_call_id)"
        ).fetchall()
    return json.dumps([[str(a), str(r)] for a, r in rows])


def test_hash_and_none_keep_no_tool_text_and_full_replays_exactly(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    config = GatewayConfig(
        ledger_path=tmp_path / "l.jsonl",
        tenant_redaction={"tenant-a": "hash", "tenant-b": "none"},
    )
    echo = tool_body("echo", {"type": "builtin", "name": "echo"})
    args: dict[str, JSONValue] = {"text": SECRET}
    with in_process(db, config) as (http, _, _):
        for headers in (TENANT_A, TENANT_B):
            assert http.post("/v1/tools", json=echo, headers=headers).status_code == 201
        body = {"program_id": "p", "node_id": "n", "arguments": args}
        first = http.post("/v1/tools/echo/call", json=body, headers=TENANT_A).json()
        assert first["status"] == "committed"
        assert first["result"] == {"arguments": args}  # the caller gets the result itself
        replay = http.post("/v1/tools/echo/call", json=body, headers=TENANT_A).json()
        assert replay["status"] == "replayed"
        assert replay["result"] is None
        assert replay["redacted"] == "hash"
        assert replay["sha256"] == digest({"arguments": args})["sha256"]
        body_b = {"program_id": "q", "node_id": "n", "arguments": args}
        http.post("/v1/tools/echo/call", json=body_b, headers=TENANT_B)
        replay_b = http.post("/v1/tools/echo/call", json=body_b, headers=TENANT_B).json()
        assert replay_b["redacted"] == "none"
        assert "sha256" not in replay_b
    stored = _stored(db)
    assert SECRET_MARK not in stored
    assert str(digest(args)["sha256"]) in stored  # tenant-a's arguments: digest and size only
    out = tmp_path / "export"
    export_parquet(db, out)
    for parquet in out.glob("*.parquet"):
        assert SECRET_MARK.encode() not in parquet.read_bytes(), parquet.name


def test_full_keeps_arguments_and_results(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with in_process(db, GatewayConfig(ledger_path=tmp_path / "l.jsonl")) as (http, _, _):
        http.post(
            "/v1/tools",
            json=tool_body("echo", {"type": "builtin", "name": "echo"}),
            headers=TENANT_A,
        )
        body = {"program_id": "p", "node_id": "n", "arguments": {"text": SECRET}}
        http.post("/v1/tools/echo/call", json=body, headers=TENANT_A)
        replay = http.post("/v1/tools/echo/call", json=body, headers=TENANT_A).json()
        assert replay["result"] == {"arguments": {"text": SECRET}}
        assert "redacted" not in replay
    assert _stored(db).count(SECRET_MARK) == 2  # the arguments and the result


@pytest.mark.anyio
async def test_a_schema_refusal_is_audited_without_the_rejected_value(
    gateway: ToolGateway, port: FakePort
) -> None:
    await register_ledger(gateway)
    ssn = "123-45-6789"
    with pytest.raises(InvalidArguments) as info:
        await call(gateway, port, "ledger", {"account": "a", "amount": ssn})
    assert ssn in info.value.message  # the caller reads what it sent wrong
    await asyncio.wrap_future(gateway.store.writer.flush())
    rows = gateway.store.repo.audit_log(limit=100)
    refused = [r.action for r in rows if r.action.action == "tool.call"]
    assert len(refused) == 1
    assert ssn not in json.dumps([refused[0].result, dict(refused[0].args)])
    assert refused[0].args["field"] == "arguments/amount"  # where, and which rule
    assert "'type'" in str(refused[0].args["message"])
