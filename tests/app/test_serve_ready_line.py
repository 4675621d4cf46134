"""``serve``'s line once the runtime is ready says when the server starts drained: a drain
left on is replayed at start, and the server then refuses every new call (and ``/ready`` is
503) until an operator ends it, which a bare "ready" line hid."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentconsole.serve import announce_ready
from tests.server.api.harness import OPERATOR, LiveServer, make_config


def _ready_line(server: LiveServer, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    server.run(announce_ready(server.app, time.monotonic(), None))
    return capsys.readouterr().err


def test_the_ready_line_says_the_server_starts_drained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "drained.duckdb"
    with LiveServer(make_config(db)) as first:
        first.wait_ready()
        assert "drained" not in _ready_line(first, capsys)
        with first.client(OPERATOR) as op:
            assert op.post("/v1/operator/drain", json={"enabled": True}).status_code == 200
    with LiveServer(make_config(db)) as second:  # the drain is replayed
        second.wait_ready()
        line = _ready_line(second, capsys)
    assert line.startswith("runtime sim ready in ")
    assert "drained by an operator: new calls refused" in line
    assert "POST /v1/operator/drain" in line
