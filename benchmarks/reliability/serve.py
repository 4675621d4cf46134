"""``agentconsole serve --runtime sim`` as a subprocess on a loopback port, for the scenarios.

Settings reach it as ``AGENTCONSOLE_<SECTION>__<FIELD>`` environment variables (the settings'
own second source), so a scenario states them as nested dicts. The URL is parsed from the
``agentconsole serving on`` line; ready means ``/ready`` answers 200.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

CLI = str(Path(sys.executable).with_name("agentconsole"))
TENANT_KEY, OTHER_TENANT_KEY, OPERATOR_KEY = "sk-a", "sk-b", "sk-operator"
TENANT = {"Authorization": f"Bearer {TENANT_KEY}"}
OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}
KEYS: dict[str, Any] = {
    "auth": {
        "tenant_keys": {TENANT_KEY: "tenant-a", OTHER_TENANT_KEY: "tenant-b"},
        "operator_keys": [OPERATOR_KEY],
    },
    "server": {"log_level": "warning"},
}


def settings_env(settings: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """``{"server": {"timeout_headers_s": 2}}`` -> ``AGENTCONSOLE_SERVER__TIMEOUT_HEADERS_S``."""
    env: dict[str, str] = {}
    for section, fields in settings.items():
        for name, value in fields.items():
            text = value if isinstance(value, str) else json.dumps(value)
            env[f"AGENTCONSOLE_{section.upper()}__{name.upper()}"] = text
    return env


def merged(*layers: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Settings layers merged section by section, later ones winning."""
    out: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for section, fields in layer.items():
            out.setdefault(section, {}).update(fields)
    return out


class ServeFailed(RuntimeError):
    """Serve exited or never became ready; ``returncode`` is its exit status (-9: killed)."""

    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode


@dataclass
class ServeProcess:
    """A running serve; ``ready_s`` is the time from spawn to ``/ready`` answering 200."""

    proc: subprocess.Popen[str]
    url: str = ""
    ready_s: float = 0.0
    output: list[str] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> int:
        """SIGKILL (no shutdown of any kind); returns the exit status."""
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(30)

    def stop(self, timeout_s: float = 30) -> int:
        """SIGINT, a clean shutdown (the store checkpoints); SIGKILL after ``timeout_s``."""
        if self.alive:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return self.kill()

    def rss_bytes(self) -> int:
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    def open_fds(self) -> int:
        return psutil.Process(self.proc.pid).num_fds()

    def tail(self, lines: int = 30) -> str:
        return "".join(self.output[-lines:])


def start_serve(
    db: Path,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    time_scale: float = 0.05,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 60,
) -> ServeProcess:
    """Start serve on ``db`` with the suite's keys plus ``settings`` and wait until ready.
    Raises :class:`ServeFailed` (with serve's last lines) if it exits or is not ready in
    time. A start that fails to import the package is tried again (up to 3 times, 5 s
    apart): in a shared checkout the editable install is re-linked while others add modules,
    and that says nothing about the store."""
    for _ in range(2):
        try:
            return _start(db, settings or {}, time_scale, env or {}, timeout_s)
        except ServeFailed as error:
            if "ModuleNotFoundError" not in str(error):
                raise
        time.sleep(5)
    return _start(db, settings or {}, time_scale, env or {}, timeout_s)


def _start(
    db: Path,
    settings: Mapping[str, Mapping[str, Any]],
    time_scale: float,
    env: Mapping[str, str],
    timeout_s: float,
) -> ServeProcess:
    started = time.monotonic()
    all_env = {**os.environ, **settings_env(merged(KEYS, settings)), **env}
    argv = [CLI, "serve", "--runtime", "sim", "--port", "0", "--db", str(db)]
    proc = subprocess.Popen(
        [*argv, "--time-scale", str(time_scale)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=all_env,
    )
    served = ServeProcess(proc)
    listening = threading.Event()

    def pump() -> None:  # also keeps the pipe drained for the whole run
        assert proc.stderr is not None
        for line in proc.stderr:
            served.output.append(line)
            if "agentconsole serving on " in line:
                served.url = line.rsplit(" ", 1)[-1].strip()
                listening.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        _wait_ready(served, listening, started + timeout_s)
    except RuntimeError as error:
        raise ServeFailed(str(error), served.kill()) from None
    except BaseException:
        served.kill()
        raise
    served.ready_s = time.monotonic() - started
    return served


def _wait_ready(served: ServeProcess, listening: threading.Event, deadline: float) -> None:
    while not listening.wait(0.05):
        if not served.alive or time.monotonic() > deadline:
            raise RuntimeError("serve did not start:\n" + served.tail())
    while True:
        try:
            if httpx.get(served.url + "/ready", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if not served.alive or time.monotonic() > deadline:
            raise RuntimeError("serve never became ready:\n" + served.tail())
        time.sleep(0.02)


def register_tools(url: str) -> None:
    """The builtin ``echo`` and ``sleep`` tools, registered by the operator for every tenant
    (a tool registration is stored: once per DuckDB file)."""
    strict = {"type": "object", "additionalProperties": False}
    bodies: list[dict[str, Any]] = [
        {
            "name": "echo",
            "parameters": {**strict, "properties": {"text": {"type": "string"}}},
            "executor": {"type": "builtin", "name": "echo"},
        },
        {
            "name": "sleep",
            "parameters": {**strict, "properties": {"seconds": {"type": "number"}}},
            "executor": {"type": "builtin", "name": "sleep"},
        },
    ]
    for body in bodies:
        body.update(side_effect=False, idempotent=True, timeout_s=10.0, description="builtin")
        response = httpx.post(f"{url}/v1/tools", json=body, headers=OPERATOR, timeout=10)
        if response.status_code != 201:
            raise RuntimeError(f"tool registration failed: {response.text}")


def metric_values(url: str) -> dict[str, float]:
    """``/metrics`` as ``{series: value}`` (label sets kept in the name)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out
