"""A loopback ``http`` tool executor for the tests of side effects: every POST is counted,
held for as long as the test's ``hold`` says (a sleep, or an event the test sets), then
answered ``status`` with a JSON body. :func:`serving` runs one on a thread of its own."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar


class LoopbackExecutor(ThreadingHTTPServer):
    """Answers each POST once ``hold()`` returns, with ``status`` and ``{"ok": 2xx}``."""

    daemon_threads = True

    def __init__(self, hold: Callable[[], object], *, status: int = 200) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hold = hold
        self.status = status
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/effect"


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackExecutor

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests += 1
        self.server.hold()
        body = json.dumps({"ok": self.server.status < 300}).encode()
        try:
            self.send_response(self.server.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gateway hung up (it interrupted the call, or the test stopped it)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the tests read the call's state from the server


Executor = TypeVar("Executor", bound="LoopbackExecutor")


@contextmanager
def serving(executor: Executor) -> Iterator[Executor]:
    """``executor`` serving on a daemon thread for the ``with`` block, stopped after it."""
    thread = threading.Thread(target=executor.serve_forever, daemon=True)
    thread.start()
    try:
        yield executor
    finally:
        executor.shutdown()
        executor.server_close()
