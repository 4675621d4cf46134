"""``serve``'s line once the runtime is ready says when the server starts drained: a drain
left on is replayed at start, and the server then refuses every new call (and ``/ready`` is
503) until an operator ends it, which a bare "ready" line hid."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from agentconsole.serve import announce_ready
from tests.server.api.harness import OPERATOR, LiveServer, chat_body, make_config


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


class _FailingStart:
    """The simulated runtime, but its start fails (a model folder SGLang cannot read)."""

    def __init__(self) -> None:
        from agentconsole.server.runtime.registry import RuntimeOptions, create_runtime

        self._inner = create_runtime("sim", RuntimeOptions(extra={"time_scale": 0.05}))

    async def start(self) -> None:
        raise ValueError("Unrecognized model in /models/none")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_runtime_that_fails_to_start_is_told_and_every_call_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """serve kept running, every call 503 "still starting" for good, the line every minute
    saying the same; now ``announce_ready`` says why (serve then stops, exit 1) and a call's
    503 says it too."""
    runtime: Any = _FailingStart()
    with LiveServer(make_config(tmp_path / "failed.duckdb"), runtime=runtime) as server:
        capsys.readouterr()
        assert server.run(announce_ready(server.app, time.monotonic(), None)) is False
        line = capsys.readouterr().err
        assert "runtime sim failed to start: ValueError: Unrecognized model" in line
        with server.client() as client:
            answer = client.post("/v1/chat/completions", json=chat_body(max_tokens=4))
        assert answer.status_code == 503
        assert "the runtime failed to start: ValueError" in answer.text
