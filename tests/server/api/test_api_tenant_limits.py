"""Tenant-level limits over HTTP: tokens per minute, concurrent programs and stored bytes
each answer 429 with ``Retry-After`` once reached, and ``/v1/tenants`` shows them."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.live.tenants import TenantLimits
from tests.server.api.harness import LiveServer, chat_body, make_config


def _call(c: httpx.Client, pid: str, max_tokens: int = 16, text: str = "x" * 400) -> httpx.Response:
    body = {**chat_body(text, max_tokens=max_tokens, ignore_eos=True)}
    return c.post("/v1/chat/completions", json={**body, "agentconsole": {"program_id": pid}})


def _server(tmp: Path, **limits: int) -> LiveServer:
    config = make_config(
        tmp / "tenants.duckdb", tenant_overrides={"tenant-a": TenantLimits(**limits)}
    )
    return LiveServer(config)


def test_tokens_per_minute(tmp_path: Path) -> None:
    with _server(tmp_path, tokens_per_minute=200) as server:
        server.wait_ready()
        with server.client() as c:
            assert _call(c, "tpm-1").status_code == 200  # ~113 prompt + 16 output tokens
            # the minute has 200 - 129 left: a call that may cost ~129 more does not fit (a
            # prompt of its own: the first one's is cached now, and would cost nothing)
            refused = _call(c, "tpm-2", text="y" * 400)
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["type"] == "tenant_limit"
            assert refused.json()["error"]["field"] == "limits.tokens_per_minute"
            assert "this call may use" in refused.json()["error"]["message"]
            assert 1 <= int(refused.headers["Retry-After"]) <= 60
            assert refused.headers["x-should-retry"] == "true"
            (row,) = c.get("/v1/tenants").json()["tenants"]
            assert row["limits"]["tokens_per_minute"] == 200
            assert 120 <= row["tokens_last_minute"] <= 200
        with server.client("sk-b") as other:  # another tenant is not limited by it
            assert _call(other, "tpm-b").status_code == 200


def test_a_call_refused_for_the_minute_leaves_its_node_as_it_was(tmp_path: Path) -> None:
    """A call refused for its tenant's minute (429, to be retried) never ran: it used to fail
    its node's attempt (an existing node FAILED, its retry attempt 2) or leave a new node
    FAILED in the DAG. Its cost is checked before its node is touched: an existing node keeps
    its state and attempts, a new one is not added, and its retry runs as attempt 1."""
    with _server(tmp_path, tokens_per_minute=200) as server:
        server.wait_ready()
        with server.client() as c:

            def call(node: str, text: str) -> httpx.Response:
                body = chat_body(text, max_tokens=16, ignore_eos=True)
                ids = {"program_id": "tpm-node", "node_id": node}
                return c.post("/v1/chat/completions", json={**body, "agentconsole": ids})

            assert call("plan", "x" * 400).status_code == 200  # ~129 of the minute's 200
            again = call("plan", "y" * 400)  # a rerun of a done node, ~129 more
            fresh = call("edit", "z" * 400)  # a new node, ~129 more
            assert (again.status_code, fresh.status_code) == (429, 429), again.text
            program = c.get("/v1/programs/tpm-node").json()
            missing = c.get("/v1/programs/tpm-node/nodes/edit")
    (plan,) = program["nodes"]
    assert (plan["node_id"], plan["state"], plan["attempts"]) == ("plan", "done", 1)
    assert missing.status_code == 404, missing.text
    assert program["state"] == "running"


def test_a_call_larger_than_the_minute_is_refused_not_to_be_retried(tmp_path: Path) -> None:
    """Only a spent minute was refused: a call of 20,000 tokens passed a 2,000 limit, every
    minute (a hostile tenant's 10x). A call that may cost more than the whole minute never
    fits: 429 saying so, and not to be retried; nothing of it ran."""
    with _server(tmp_path, tokens_per_minute=2000) as server:
        server.wait_ready()
        with server.client() as c:
            huge = _call(c, "tpm-huge", max_tokens=20_000)
            assert huge.status_code == 429, huge.text
            assert huge.json()["error"]["field"] == "limits.tokens_per_minute"
            assert "more than tenant 'tenant-a'" in huge.json()["error"]["message"]
            assert huge.headers["x-should-retry"] == "false"
            (row,) = c.get("/v1/tenants").json()["tenants"]
            assert (row["tokens_last_minute"], row["in_flight"]) == (0, 0)
            assert _call(c, "tpm-small").status_code == 200  # the minute is untouched


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
            assert c.post("/v1/programs/cp-3/cancel", json={}).status_code == 200
    # counted as the events go by, and the running ones rebuilt after a restart count
    with _server(tmp_path, concurrent_programs=2) as server:
        server.wait_ready()
        with server.client() as c:
            assert c.post("/v1/programs", json={"program_id": "cp-5"}).status_code == 201
            refused = c.post("/v1/programs", json={"program_id": "cp-6"})
            assert refused.status_code == 429, refused.text  # cp-2 runs still, and cp-5


def test_a_tenant_runs_at_most_ten_thousand_programs_unless_told() -> None:
    """Each running program holds memory until it ends or idles out (~75 KB): one tenant
    opening programs in a loop held gigabytes; the default bounds it near 1 GB."""
    assert TenantLimits().concurrent_programs == 10_000


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


def _stored(c: httpx.Client) -> int:
    (row,) = c.get("/v1/tenants").json()["tenants"]
    stored: int = row["stored_bytes"]
    return stored


def test_refused_operator_calls_fill_no_tenant_s_storage(tmp_path: Path) -> None:
    """Anonymous refusals on an operator route naming a tenant's program used to be stored as
    that tenant's events, until its stored-bytes limit locked it out; a tenant key's own
    refusals (its console polling an operator view) fill no tenant's storage either."""
    with _server(tmp_path, stored_bytes=50_000) as server:
        server.wait_ready()
        with server.client() as c:
            assert c.post("/v1/programs", json={"program_id": "victim"}).status_code == 201
            before = _stored(c)
        with server.client(None) as anonymous:
            for _ in range(300):
                refused = anonymous.post("/v1/operator/programs/victim/cancel")
                assert refused.status_code == 401
            long_target = anonymous.post("/v1/operator/programs/" + "v" * 20_000 + "/cancel")
            assert long_target.status_code == 401
        with server.client() as c:
            for _ in range(20):  # a tenant's console polling an operator view, refused
                assert c.get("/v1/operator/audit").status_code == 403
            assert _stored(c) - before < 500  # its own program's events only
            assert c.post("/v1/programs", json={"program_id": "v2"}).status_code == 201
        desk = server.live.desk
        # the anonymous caller's 301 refusals are audited up to one caller's share of the
        # minute; the tenant's 20 all are
        assert desk.refusals.dropped == 301 - desk.refusals.per_actor


def test_nodes_and_tool_calls_are_refused_past_stored_bytes(tmp_path: Path) -> None:
    with _server(tmp_path, stored_bytes=6_000) as server:
        server.wait_ready()
        with server.client() as c:
            assert c.post("/v1/programs", json={"program_id": "nb"}).status_code == 201
            answers = []
            for i in range(40):
                node = {"node_id": f"t{i}", "kind": "tool", "tool": "search"}
                answers.append(c.post("/v1/programs/nb/nodes", json=node))
            codes = [a.status_code for a in answers]
            assert codes[0] == 201
            assert 429 in codes, codes
            refused = next(a for a in answers if a.status_code == 429)
            assert refused.json()["error"]["field"] == "limits.stored_bytes"
            assert _stored(c) < 6_000 + 2_000  # stopped within a node's events


def test_a_program_holds_at_most_its_tenant_s_node_limit(tmp_path: Path) -> None:
    with _server(tmp_path, program_nodes=5) as server:
        server.wait_ready()
        with server.client() as c:
            assert c.post("/v1/programs", json={"program_id": "pn"}).status_code == 201
            for i in range(5):
                node = {"node_id": f"t{i}", "kind": "tool", "tool": "search"}
                assert c.post("/v1/programs/pn/nodes", json=node).status_code == 201
            node = {"node_id": "t5", "kind": "tool", "tool": "search"}
            refused = c.post("/v1/programs/pn/nodes", json=node)
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"]["field"] == "limits.program_nodes"
            assert "Retry-After" not in refused.headers
            too_many = _call(c, "pn")  # a chat call's node is a node too
            assert too_many.status_code == 403
            (row,) = c.get("/v1/tenants").json()["tenants"]
            assert row["limits"]["program_nodes"] == 5


def test_calls_sent_in_parallel_cannot_pass_the_minute_together(tmp_path: Path) -> None:
    """Tokens are charged at a call's end; calls in flight hold what they may cost, so a
    tenant cannot send many at once before the first one's tokens count."""
    with _server(tmp_path, tokens_per_minute=500) as server:
        server.wait_ready()

        def send(i: int) -> int:
            with server.client() as c:
                return _call(c, f"par-{i}", max_tokens=256).status_code

        with ThreadPoolExecutor(max_workers=20) as pool:
            codes = list(pool.map(send, range(20)))
        assert codes.count(200) <= 3, codes
        assert set(codes) <= {200, 429}
        with server.client() as c:
            (row,) = c.get("/v1/tenants").json()["tenants"]
            assert row["tokens_last_minute"] <= 500 + 2 * (113 + 256)
            assert server.live.service.tenants.usage("tenant-a", time.time())["in_flight"] == 0


def test_a_tenant_s_priority_stops_at_its_ceiling(tmp_path: Path) -> None:
    """``priority`` 1000 would put one tenant's calls ahead of every other tenant's by 1000 s
    of policy key; it is taken as the tenant's ``max_priority`` (0 unless the operator
    grants more), while a lower one still orders the tenant's own calls."""
    config = make_config(
        tmp_path / "prio.duckdb", tenant_overrides={"tenant-b": TenantLimits(max_priority=5)}
    )
    with LiveServer(config) as server:
        server.wait_ready()
        queued: list[Event] = []
        server.live.service.hub.subscribe(
            lambda e: queued.append(e) if e.kind is EventKind.CALL_QUEUED else None
        )
        with server.client() as a, server.client("sk-b") as b:
            for client, pid, asked in ((a, "pa-1", 1000), (a, "pa-2", -3), (b, "pb-1", 1000)):
                body = {**chat_body(priority=asked), "agentconsole": {"program_id": pid}}
                assert client.post("/v1/chat/completions", json=body).status_code == 200
        taken = {e.program_id: e.data["priority"] for e in queued}
        assert taken == {"pa-1": 0, "pa-2": -3, "pb-1": 5}


def test_concurrent_calls(tmp_path: Path) -> None:
    with _server(tmp_path, concurrent_calls=2) as server:
        server.wait_ready()

        def send(i: int) -> httpx.Response:
            with server.client() as c:
                return _call(c, f"cc-{i}", max_tokens=1024)  # long enough to overlap

        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(send, range(8)))
        codes = [a.status_code for a in answers]
        assert codes.count(200) >= 2, codes
        assert 429 in codes, codes
        refused = next(a for a in answers if a.status_code == 429)
        assert refused.json()["error"]["field"] == "limits.concurrent_calls"
        assert refused.headers["Retry-After"] == "1"
        with server.client() as c:  # the holds were all released: calls run again
            assert _call(c, "cc-after").status_code == 200
        assert server.live.service.tenants.usage("tenant-a", time.time())["in_flight"] == 0


def test_the_minute_outlives_a_restart(tmp_path: Path) -> None:
    """A restart handed every tenant a fresh minute (``tokens_last_minute`` 7,471 -> 0): the
    last minute's call ends in the store charge it again, at their own times."""
    with _server(tmp_path, tokens_per_minute=200) as first:
        first.wait_ready()
        with first.client() as c:
            assert _call(c, "min-1").status_code == 200  # ~129 of the minute's 200
            (before,) = c.get("/v1/tenants").json()["tenants"]
    with _server(tmp_path, tokens_per_minute=200) as second:
        second.wait_ready()
        with second.client() as c:
            (after,) = c.get("/v1/tenants").json()["tenants"]
            refused = _call(c, "min-2", text="z" * 400)  # another ~129: past the 200
    assert after["tokens_last_minute"] == before["tokens_last_minute"] > 0
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["field"] == "limits.tokens_per_minute"
