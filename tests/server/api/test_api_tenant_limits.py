"""Tenant-level limits over HTTP: tokens per minute, concurrent programs and stored bytes
each answer 429 with ``Retry-After`` once reached, and ``/v1/tenants`` shows them."""

from __future__ import annotations

from pathlib import Path

import httpx

from agentconsole.server.live.tenants import TenantLimits
from tests.server.api.harness import LiveServer, chat_body, make_config


def _call(c: httpx.Client, pid: str, max_tokens: int = 16) -> httpx.Response:
    body = {**chat_body("x" * 400, max_tokens=max_tokens, ignore_eos=True)}
    return c.post("/v1/chat/completions", json={**body, "agentconsole": {"program_id": pid}})


def _server(tmp: Path, **limits: int) -> LiveServer:
    config = make_config(
        tmp / "tenants.duckdb", tenant_overrides={"tenant-a": TenantLimits(**limits)}
    )
    return LiveServer(config)


def test_tokens_per_minute(tmp_path: Path) -> None:
    with _server(tmp_path, tokens_per_minute=120) as server:
        server.wait_ready()
        with server.client() as c:
            assert _call(c, "tpm-1").status_code == 200  # ~113 prompt + 16 output tokens
            refused = _call(c, "tpm-2")
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["type"] == "tenant_limit"
            assert refused.json()["error"]["field"] == "limits.tokens_per_minute"
            assert 1 <= int(refused.headers["Retry-After"]) <= 60
            (row,) = c.get("/v1/tenants").json()["tenants"]
            assert row["limits"]["tokens_per_minute"] == 120
            assert row["tokens_last_minute"] >= 120
        with server.client("sk-b") as other:  # another tenant is not limited by it
            assert _call(other, "tpm-b").status_code == 200


def test_concurrent_programs(tmp_path: Path) -> None:
    with _server(tmp_path, concurrent_programs=2) as server:
        server.wait_ready()
        with server.client() as c:
            for pid in ("cp-1", "cp-2"):
                assert c.post("/v1/programs", json={"program_id": pid}).status_code == 201
            refused = c.post("/v1/programs", json={"program_id": "cp-3"})
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["field"] == "limits.concurrent_programs"
            assert refused.headers["Retry-After"] == "5"
            assert _call(c, "cp-4").status_code == 429  # a first call opens a program too
            assert c.post("/v1/programs/cp-1/finish", json={}).status_code == 200
            assert c.post("/v1/programs", json={"program_id": "cp-3"}).status_code == 201


def test_stored_bytes(tmp_path: Path) -> None:
    with _server(tmp_path, stored_bytes=4_000) as server:
        server.wait_ready()
        with server.client() as c:
            answers = [_call(c, f"sb-{i}").status_code for i in range(20)]
            assert answers[0] == 200
            assert 429 in answers  # the events of the first calls filled the budget
            (row,) = c.get("/v1/tenants").json()["tenants"]
            assert row["stored_bytes"] >= 4_000
    # counted from the store after a restart
    with _server(tmp_path, stored_bytes=4_000) as server:
        server.wait_ready()
        with server.client() as c:
            refused = c.post("/v1/programs", json={"program_id": "sb-new"})
            assert refused.status_code == 429
            assert refused.json()["error"]["field"] == "limits.stored_bytes"
