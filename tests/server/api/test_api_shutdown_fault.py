"""A fault while the server stops (here the service's own stop) still closes the store:
its last rows are written and it commits and checkpoints (before, the failure skipped the
projector's last write and the store's close, and the writer's daemon threads died with
the process, taking what was queued with them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentconsole.server.store import Store
from tests.server.api.harness import LiveServer, chat_body, make_config


def test_a_failing_stop_still_closes_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "fault.duckdb"
    server = LiveServer(make_config(db))
    with server:
        server.wait_ready()
        with server.client() as client:
            body = chat_body("kept", max_tokens=2, agentconsole={"program_id": "kept"})
            assert client.post("/v1/chat/completions", json=body).status_code == 200

        async def failing_stop() -> None:
            raise RuntimeError("the service's stop failed")

        monkeypatch.setattr(server.live.service, "stop", failing_stop)
        store = server.live.store
    assert store.closed
    with Store.open(db) as reopened:
        assert "kept" in {p.program_id for p in reopened.repo.list_programs()}
