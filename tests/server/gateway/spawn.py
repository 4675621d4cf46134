"""Start and stop a test server (:mod:`.mini_server` or :mod:`.real_server`) as a child
process."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]


class ServerProcess:
    """One server child on a real DuckDB file; ``base_url`` once :meth:`start` returned."""

    def __init__(
        self, db: Path, ledger: Path, env: dict[str, str] | None = None, *, real: bool = False
    ) -> None:
        self.db, self.ledger = db, ledger
        #: The real app (``server.app.create_app`` + the gateway extension), not the mini one.
        self.module = "tests.server.gateway." + ("real_server" if real else "mini_server")
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    def start(self, timeout: float = 60.0) -> ServerProcess:
        """Spawn and wait for ``READY <port>``; raises ``RuntimeError`` if it dies first."""
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                self.module,
                "--db",
                str(self.db),
                "--ledger",
                str(self.ledger),
            ],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                if line.startswith("READY"):
                    self.base_url = f"http://127.0.0.1:{int(line.split()[1])}"
                    return self
            if self.proc.poll() is not None:
                break
        err = self.proc.stderr.read() if self.proc.stderr and self.proc.poll() is not None else ""
        self.kill()
        raise RuntimeError(f"server did not start: {err[-2000:]}")

    def kill(self) -> int | None:
        """SIGKILL the child (no-op if gone); returns its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(30)

    def stop(self) -> int | None:
        """SIGTERM (a graceful shutdown: the store checkpoints) and wait."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                return self.kill()
        return self.proc.returncode

    def wait(self, timeout: float) -> int:
        """Wait for the child to exit on its own (a crash point)."""
        assert self.proc is not None
        return self.proc.wait(timeout)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def served(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    tools: list[dict[str, Any]],
) -> Iterator[ServerProcess]:
    """A module fixture's body: a server (``request.param``: ``"mini"`` or ``"real"``) with
    ``tools`` registered by the operator, stopped after the module."""
    tmp = tmp_path_factory.mktemp(str(request.param))
    real = request.param == "real"
    with ServerProcess(tmp / "store.duckdb", tmp / "ledger.jsonl", real=real) as proc:
        headers = {"Authorization": "Bearer sk-operator"}
        for body in tools:
            response = httpx.post(f"{proc.base_url}/v1/tools", json=body, headers=headers)
            assert response.status_code == 201, response.text
        yield proc
