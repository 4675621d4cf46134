"""Builtin executors, small and in-process: for tests, the demo and the trace replayer.

* ``echo`` returns ``{"arguments": ...}``;
* ``sleep`` waits ``seconds`` (then fails if ``fail`` is true), a stand-in for a tool's latency;
* ``ledger`` applies a side effect that has **no** idempotency key downstream: every
  execution appends one line to the ledger file and fsyncs it, so a test can count applied
  effects per ``tool_call_id`` across crashes;
* ``keyed_ledger`` is the same downstream honouring the key: it appends a line for every
  delivery but applies (``"applied": true``) only the first per key.

Ledger lines are JSON: ``{"key", "tool", "applied", "pid", "t", "arguments"}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from agentconsole.server.gateway.executors import ExecutionFailed, Invocation
from agentconsole.server.store.jsonutil import JSONValue

BuiltinFn = Callable[[Invocation], Awaitable[JSONValue]]
SLEEP_MAX_S = 600.0


async def _echo(invocation: Invocation) -> JSONValue:
    return {"arguments": invocation.arguments}


async def _sleep(invocation: Invocation) -> JSONValue:
    seconds = invocation.arguments.get("seconds", 0.0)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ExecutionFailed("seconds must be a number", ambiguous=False, permanent=True)
    await asyncio.sleep(min(max(float(seconds), 0.0), SLEEP_MAX_S))
    if invocation.arguments.get("fail") is True:
        raise ExecutionFailed("the sleep tool was asked to fail", ambiguous=False)
    return {"slept": float(seconds)}


class Ledger:
    """An append-only, fsynced effect log; the thread lock makes check-and-append atomic."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._applied: set[str] | None = None

    def _load(self) -> set[str]:
        applied: set[str] = set()
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except ValueError:  # a line a kill cut short
                    continue
                if row.get("applied"):
                    applied.add(row["key"])
        return applied

    def append(self, invocation: Invocation, *, dedupe: bool) -> JSONValue:
        """Record one delivery; apply it unless ``dedupe`` and the key was applied before."""
        with self._lock:
            if self._applied is None:
                self._applied = self._load()
            applied = not (dedupe and invocation.tool_call_id in self._applied)
            row = {
                "key": invocation.tool_call_id,
                "tool": invocation.tool,
                "applied": applied,
                "pid": os.getpid(),
                "t": time.time(),
                "arguments": invocation.arguments,
            }
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(row, separators=(",", ":")) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            if applied:
                self._applied.add(invocation.tool_call_id)
        return {"applied": applied, "key": invocation.tool_call_id}


def builtin_functions(ledger_path: Path | None) -> dict[str, BuiltinFn]:
    """Every builtin by name; the ledgers only when ``ledger_path`` is set."""
    functions: dict[str, BuiltinFn] = {"echo": _echo, "sleep": _sleep}
    if ledger_path is not None:
        ledger = Ledger(ledger_path)

        async def plain(invocation: Invocation) -> JSONValue:
            return await asyncio.to_thread(ledger.append, invocation, dedupe=False)

        async def keyed(invocation: Invocation) -> JSONValue:
            return await asyncio.to_thread(ledger.append, invocation, dedupe=True)

        functions["ledger"] = plain
        functions["keyed_ledger"] = keyed
    return functions


def read_ledger(path: Path) -> list[dict[str, JSONValue]]:
    """Every complete line of a ledger file (for tests and operators)."""
    if not path.exists():
        return []
    rows: list[dict[str, JSONValue]] = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows
