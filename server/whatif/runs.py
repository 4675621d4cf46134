"""One background ``agentconsole bench`` run at a time, on a trace the server just wrote.

The bench runs as a child process (its own session, so a timeout or a server stop kills it
and its worker processes together) with ``--jobs`` bounded and ``--json`` next to the trace;
a worker thread waits for it. The server never imports ``bench`` (the composition root sits
above it): the child is the same command the answer prints, started from this interpreter.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentconsole.server.live.errors import Conflict
from agentconsole.server.whatif.window import REPORT_SUFFIX

#: ``agentconsole`` from this interpreter, whatever PATH says
LAUNCH = (sys.executable, "-c", "from agentconsole.cli import main; main()")
#: the most of the bench's output kept (its table is a few KiB)
OUTPUT_BYTES = 64 * 1024
#: metrics of each policy in the run's answer (the full report is the JSON file)
METRICS = (
    "finished",
    "cancelled",
    "failed",
    "e2e_p50_s",
    "e2e_p95_s",
    "e2e_p99_s",
    "ttft_p50_s",
    "goodput_programs_per_s",
    "max_tenant_slowdown",
)


@dataclass(slots=True)
class BenchRun:
    """A run: ``running``, then ``done``, ``failed``, ``timed_out`` or ``stopped``."""

    trace: Path
    command: str
    started_at: float
    state: str = "running"
    finished_at: float | None = None
    exit_code: int | None = None
    table: str = ""
    error: str | None = None
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def report(self) -> Path:
        """The bench's ``--json`` file."""
        return self.trace.with_name(self.trace.name + REPORT_SUFFIX)

    def json(self) -> dict[str, Any]:
        """The answer of ``GET /v1/operator/whatif/run``."""
        return {
            "state": self.state,
            "trace": str(self.trace),
            "command": self.command,
            "report": str(self.report) if self.state == "done" else None,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "exit_code": self.exit_code,
            "table": self.table,
            "policies": self.policies,
            "error": self.error,
        }


def _tail(data: bytes) -> str:
    return data[-OUTPUT_BYTES:].decode("utf-8", "replace")


def _summary(report: Path) -> dict[str, dict[str, Any]]:
    """Each policy's :data:`METRICS` from the bench's JSON report."""
    runs = json.loads(report.read_text()).get("policies", {})
    return {name: {k: run.get(k) for k in METRICS} for name, run in runs.items()}


class BenchRunner:
    """Starts, bounds and reports bench runs, one at a time."""

    def __init__(self, timeout_s: float, jobs: int) -> None:
        self.timeout_s = timeout_s
        self.jobs = jobs
        self._lock = threading.Lock()
        self._run: BenchRun | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None

    @property
    def latest(self) -> BenchRun | None:
        """The last run started (None before the first)."""
        return self._run

    @property
    def busy(self) -> bool:
        """Whether a run is in progress."""
        run = self._run
        return run is not None and run.state == "running"

    def check_idle(self) -> None:
        """Raise :class:`Conflict` while a run is in progress."""
        if self.busy:
            raise Conflict(  # it passes once the run ends
                "a bench run is in progress: read GET /v1/operator/whatif/run", retryable=True
            )

    def start(self, argv: Sequence[str], trace: Path, command: str) -> BenchRun:
        """Run ``argv`` (``agentconsole bench ...``; its program name is replaced by this
        interpreter's) with ``--jobs`` and ``--json`` added, in the background. Raises
        :class:`Conflict` while another run is in progress."""
        with self._lock:
            self.check_idle()
            run = BenchRun(trace, command, time.time())
            args = [*LAUNCH, *argv[1:], "--jobs", str(self.jobs), "--json", str(run.report)]
            self._process = subprocess.Popen(
                args,
                cwd=trace.parent,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            self._run = run
            self._thread = threading.Thread(
                target=self._wait, args=(run, self._process), name="whatif-bench", daemon=True
            )
            self._thread.start()
            return run

    def _wait(self, run: BenchRun, process: subprocess.Popen[bytes]) -> None:
        """Wait for ``process`` (killing it past the timeout) and record how it ended."""
        try:
            out, err = process.communicate(timeout=self.timeout_s)
            state = "done" if process.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            self._kill(process)
            out, err = process.communicate()
            state = "timed_out"
        run.table, run.exit_code = _tail(out), process.returncode
        if state == "done":
            try:
                run.policies = _summary(run.report)
            except (OSError, ValueError, AttributeError) as error:
                state, run.error = "failed", f"unreadable bench report: {error}"
        elif state == "timed_out":
            run.error = f"the bench ran past {self.timeout_s:g} s and was stopped"
        elif run.state != "stopped":
            run.error = _tail(err).strip()[-2000:] or f"bench exited with {process.returncode}"
        if run.state == "running":  # not stopped meanwhile
            run.state = state
        run.finished_at = time.time()

    @staticmethod
    def _kill(process: subprocess.Popen[bytes]) -> None:
        """Kill the bench and its worker processes (its own session: one group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Kill a run in progress (the server is stopping) and wait for its thread."""
        with self._lock:
            run, process, thread = self._run, self._process, self._thread
            if run is not None and run.state == "running" and process is not None:
                run.state, run.error = "stopped", "the server stopped"
                self._kill(process)
        if thread is not None:
            thread.join(timeout_s)
