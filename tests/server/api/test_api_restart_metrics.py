"""A restart creates nothing: the programs it rebuilds as running are not counted as created
again (``agentconsole_programs_created_total`` is a counter; its ``increase()`` counted every
running program once more per restart), while their tenant still lists them."""

from __future__ import annotations

from pathlib import Path

from tests.server.api.harness import OPERATOR, LiveServer, chat_body, make_config

CREATED = "agentconsole_programs_created_total"


def _created(metrics: str) -> float:
    (line,) = (x for x in metrics.splitlines() if x.startswith(f"{CREATED} "))
    return float(line.split()[1])


def test_a_restart_with_no_new_program_creates_none(tmp_path: Path) -> None:
    db = tmp_path / "created.duckdb"
    with LiveServer(make_config(db)) as first:
        first.wait_ready()
        with first.client() as c:
            for name in ("one", "two"):
                body = chat_body("go", max_tokens=4, agentconsole={"program_id": name})
                assert c.post("/v1/chat/completions", json=body).status_code == 200
            assert _created(c.get("/metrics").text) == 2
    with LiveServer(make_config(db)) as second:
        second.wait_ready()
        assert {"one", "two"} <= set(second.live.service.controller.programs)
        with second.client(OPERATOR) as ops:
            assert _created(ops.get("/metrics").text) == 0
            (tenant,) = ops.get("/v1/tenants").json()["tenants"]
        assert (tenant["tenant"], tenant["running"], tenant["programs"]) == ("tenant-a", 2, 2)
        with second.client() as c:
            body = chat_body("go", max_tokens=4, agentconsole={"program_id": "three"})
            assert c.post("/v1/chat/completions", json=body).status_code == 200
            assert _created(c.get("/metrics").text) == 1
