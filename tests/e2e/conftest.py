"""``agentconsole serve`` as a real subprocess on a loopback port (parsed from its output)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

CLI = str(Path(sys.executable).with_name("agentconsole"))


@dataclass
class ServeProcess:
    """A running ``agentconsole serve``; ``output`` collects its stderr lines."""

    proc: subprocess.Popen[str]
    url: str = ""
    output: list[str] = field(default_factory=list)

    def stop(self, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout)


def start_serve(
    args: list[str], env: Mapping[str, str] | None = None, *, timeout_s: float = 60
) -> ServeProcess:
    """Start ``agentconsole serve ARGS --port 0`` and wait until it listens and ``/ready``
    answers (within ``timeout_s`` in all; an SGLang engine takes a minute on 2 cores)."""
    proc = subprocess.Popen(
        [CLI, "serve", "--port", "0", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
    )
    served = ServeProcess(proc)
    found = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            served.output.append(line)
            if "agentconsole serving on " in line:
                served.url = line.rsplit(" ", 1)[-1].strip()
                found.set()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    try:
        if not found.wait(timeout_s):
            raise RuntimeError("serve did not start:\n" + "".join(served.output[-40:]))
        while httpx.get(served.url + "/ready", timeout=10).status_code != 200:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("serve never became ready:\n" + "".join(served.output[-40:]))
            time.sleep(0.05)
    except BaseException:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
        raise
    return served


@pytest.fixture(scope="module")
def sim_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    db = Path(tmp_path_factory.mktemp("serve")) / "serve.duckdb"
    served = start_serve(["--runtime", "sim", "--db", str(db), "--time-scale", "0.05"])
    try:
        yield served
    finally:
        served.stop()
