"""``/health`` answers at once; ``/ready`` is 503 until the runtime answers, whenever the
store writer is dead, and while an operator drains the server (new calls are refused 503
``draining`` then: a load balancer reading 200 kept sending them)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.readiness import up
from tests.server.api.harness import OPERATOR, LiveServer, chat_body, make_config, wait_until


def test_ready_waits_for_the_runtime_and_the_store(tmp_path: Path) -> None:
    config = make_config(tmp_path / "ready.duckdb", runtime_extra={"start_delay_s": 1.0})
    with LiveServer(config) as server, server.client(None) as anon:
        assert anon.get("/health").json() == {"status": "ok"}
        early = anon.get("/ready")
        assert early.status_code == 503
        assert early.json() == {"runtime": False, "store": True, "draining": False}
        started = time.monotonic()
        with server.client() as c:  # a call during start-up waits for the runtime
            assert c.post("/v1/chat/completions", json=chat_body()).status_code == 200
        assert time.monotonic() - started < 5
        wait_until(lambda: anon.get("/ready").status_code == 200, 5)
        server.live.store.writer.stop(5)  # the writer thread ends: the store is unusable
        late = anon.get("/ready")
        assert late.status_code == 503
        assert late.json() == {"runtime": True, "store": False, "draining": False}
        assert anon.get("/health").status_code == 200


def test_a_runtime_that_never_starts_gives_503_to_calls(tmp_path: Path) -> None:
    config = make_config(
        tmp_path / "slow.duckdb", runtime_extra={"start_delay_s": 30.0}, ready_timeout_s=0.3
    )
    with LiveServer(config) as server, server.client() as c:
        refused = c.post("/v1/chat/completions", json=chat_body())
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "5"
    assert refused.json()["error"]["type"] == "unavailable"


def test_ready_is_503_while_an_operator_drains(tmp_path: Path) -> None:
    with LiveServer(make_config(tmp_path / "drain.duckdb")) as server:
        server.wait_ready()
        with server.client(None) as anon, server.client(OPERATOR) as op:
            assert anon.get("/ready").json() == {"runtime": True, "store": True, "draining": False}
            assert op.post("/v1/operator/drain", json={"enabled": True}).status_code == 200
            drained = anon.get("/ready")
            assert drained.status_code == 503
            assert drained.json() == {"runtime": True, "store": True, "draining": True}
            assert anon.head("/ready").status_code == 503  # what a load balancer probes
            assert anon.get("/health").status_code == 200  # alive all the same
            assert up(drained)  # a start-up wait takes it for up
            assert op.post("/v1/operator/drain", json={"enabled": False}).status_code == 200
            undrained = anon.get("/ready")
            assert undrained.status_code == 200
            assert undrained.json() == {"runtime": True, "store": True, "draining": False}
            assert anon.head("/ready").status_code == 200
