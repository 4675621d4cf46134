"""The real ``agentconsole serve --runtime sim --demo`` in a subprocess, for integration tests.

Binds a free loopback port (``--port 0``; the URL is read from the line serve prints), uses a
fresh DuckDB file, waits for ``/ready``, and stops the server with SIGINT (then SIGKILL).
``open_program`` creates a program that stays running (it waits on an agent-run tool), the
kind an operator preempts and cancels.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.readiness import up

OPERATOR_KEY = "sk-operator"
TENANT_KEY = "sk-tenant-a"
SERVE = Path(sys.executable).with_name("agentconsole")


@dataclass(slots=True)
class RealServer:
    """A running server: its URL, keys and output so far."""

    url: str
    key: str = OPERATOR_KEY
    tenant_key: str = TENANT_KEY
    output: list[str] = field(default_factory=list)

    def get(self, path: str) -> dict[str, object]:
        """GET ``path`` with the operator key."""
        response = httpx.get(self.url + path, headers={"Authorization": f"Bearer {self.key}"})
        response.raise_for_status()
        body: dict[str, object] = response.json()
        return body

    def open_program(self, program_id: str) -> None:
        """Create ``program_id`` (tenant-a) with one LLM call done and a tool call running."""
        headers = {"Authorization": f"Bearer {self.tenant_key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as http:
            http.post(
                "/v1/programs", json={"program_id": program_id, "labels": {"source": "ui-test"}}
            )
            chat = {
                "model": "auto",
                "messages": [{"role": "user", "content": "look something up"}],
                "max_tokens": 16,
                "agentconsole": {"program_id": program_id, "node_id": "n0"},
            }
            answer = http.post("/v1/chat/completions", json=chat)
            if answer.is_error:  # a 500 is a bug the server logged: show its traceback
                lines = [line for line in self.output if " - httpx - " not in line]
                tail = "".join(lines[-60:])  # the demo agents' request lines left out
                raise AssertionError(f"{answer.status_code} {answer.text}\nserver output:\n{tail}")
            node = {"node_id": "n1", "kind": "tool", "parents": ["n0"], "tool": "web_search"}
            http.post(f"/v1/programs/{program_id}/nodes", json=node).raise_for_status()
            start = {"node_id": "n1", "tool": "web_search"}
            http.post(f"/v1/programs/{program_id}/tool-calls/start", json=start).raise_for_status()

    def finish_program(self, program_id: str, workload: str) -> None:
        """Run ``program_id`` (tenant-a, labelled ``workload``) through one LLM call to its
        finish: what the door learns a kind's run and peak from."""
        headers = {"Authorization": f"Bearer {self.tenant_key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as http:
            body = {"program_id": program_id, "labels": {"workload": workload}}
            http.post("/v1/programs", json=body).raise_for_status()
            chat = {
                "model": "auto",
                "messages": [{"role": "user", "content": f"the task of {program_id}"}],
                "max_tokens": 8,
                "agentconsole": {"program_id": program_id},
            }
            http.post("/v1/chat/completions", json=chat).raise_for_status()
            http.post(f"/v1/programs/{program_id}/finish", json={}).raise_for_status()


def _pump(stream: object, sink: list[str], found: threading.Event) -> None:
    for line in iter(stream.readline, ""):  # type: ignore[attr-defined]
        sink.append(line)
        if "serving on http" in line:
            found.set()


@contextlib.contextmanager
def serve_real(tmp: Path, *, demo: bool = True, timeout_s: float = 90.0) -> Iterator[RealServer]:
    """Run the real server for the ``with`` block."""
    args = [str(SERVE), "serve", "--runtime", "sim", "--port", "0", "--db", str(tmp / "db.duckdb")]
    args += ["--demo"] if demo else ["--no-demo"]
    args += ["--log-level", "warning"]
    process = subprocess.Popen(
        args,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ),
        cwd=tmp,
    )
    output: list[str] = []
    found = threading.Event()
    threading.Thread(target=_pump, args=(process.stderr, output, found), daemon=True).start()
    try:
        if not found.wait(timeout_s):
            raise RuntimeError("serve did not start:\n" + "".join(output[-40:]))
        match = re.search(r"serving on (http://\S+)", "".join(output))
        assert match is not None
        server = RealServer(url=match.group(1), output=output)
        deadline = time.monotonic() + timeout_s
        while not up(httpx.get(server.url + "/ready")):  # 503 for a drain alone: up
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("serve never became ready:\n" + "".join(output[-40:]))
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
