"""A real server for tests: ``serve``'s own server (``make_server``: the app, uvicorn, the
extensions mounted on both) on a loopback port, in a thread, with ``serve``'s HTTP limits
(``connections.py``; ``limits`` changes them) and any extensions.

Litestar's in-process test clients hang on infinite SSE streams, so every API test talks real
HTTP to this server. It runs on its own event loop in a thread; :meth:`LiveServer.run` executes
a coroutine on that loop (to inspect or poke the live objects).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx

from agentconsole.scheduler.runtime import Runtime
from agentconsole.serve import Listener, make_server
from agentconsole.server.api.config import ServerConfig
from agentconsole.server.api.connections import HttpLimits
from agentconsole.server.api.deps import Live
from agentconsole.server.app import Extension
from agentconsole.server.gateway import GatewayConfig, GatewayExtension
from tests.readiness import up

T = TypeVar("T")
TENANT_KEYS = {"sk-a": "tenant-a", "sk-b": "tenant-b", "sk-dev": "default"}
OPERATOR = "sk-operator"


def make_config(db: Path, **changes: Any) -> ServerConfig:
    """A sim server config with tenants a and b, a fast runtime by default."""
    base = ServerConfig(
        db_path=db,
        runtime="sim",
        runtime_extra={"time_scale": 0.05},
        tenant_keys=TENANT_KEYS,
        operator_keys=(OPERATOR,),
        ready_timeout_s=5.0,
    )
    return replace(base, **changes)


class LiveServer:
    """Context manager: start on enter (waits until it listens), stop on exit."""

    def __init__(
        self,
        config: ServerConfig,
        runtime: Runtime | None = None,
        *,
        extensions: Sequence[Extension] = (),
        limits: HttpLimits | None = None,
    ) -> None:
        listener = Listener(
            "127.0.0.1", 0, "warning", limits or HttpLimits(), graceful_shutdown_s=3
        )
        self.server = make_server(
            config, listener, extensions, on_started=self._started, runtime=runtime
        )
        self.app = self.server.app
        self.loop: asyncio.AbstractEventLoop | None = None
        self.url = ""
        self._thread = threading.Thread(target=self.server.run, daemon=True)

    async def _started(self, url: str) -> None:
        self.loop = asyncio.get_running_loop()

    def __enter__(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while self.loop is None:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        self.url = self.server.url
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.server.should_exit = True
        self._thread.join(30)

    @property
    def live(self) -> Live:
        live: Live = self.app.state.live
        return live

    def client(self, key: str | None = "sk-a", **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        kwargs.setdefault("timeout", 30)
        return httpx.Client(base_url=self.url, headers=headers, **kwargs)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run ``coro`` on the server's loop and return its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def wait_ready(self, timeout: float = 10) -> None:
        """Wait until the server is up: ``/ready`` 200, or 503 for an operator's drain alone
        (a restart on a drained store starts drained: ``readiness.up``)."""
        with self.client(None) as c:
            deadline = time.monotonic() + timeout
            while not up(c.get("/ready")):
                if time.monotonic() > deadline:
                    raise TimeoutError("server not ready")
                time.sleep(0.05)


@contextlib.contextmanager
def gateway_server(db: Path, **changes: Any) -> Iterator[LiveServer]:
    """A ready server (``make_config(db, **changes)``) with the tool gateway mounted; tenants
    may register any builtin."""
    gateway = GatewayExtension(GatewayConfig(tenant_builtins=None))
    with LiveServer(make_config(db, **changes), extensions=[gateway]) as live:
        live.wait_ready()
        yield live


@contextlib.contextmanager
def both_lanes(
    root: Path, runtime: Callable[[], Runtime] | None = None
) -> Iterator[tuple[LiveServer, LiveServer]]:
    """Two ready servers, one with the express lane and one without (Litestar's controllers
    answer every route), each on a store of its own under ``root`` and, with ``runtime``, a
    runtime of its own from it: a test asks both and expects the same answer."""

    def server(name: str, **changes: Any) -> LiveServer:
        return LiveServer(
            make_config(root / f"{name}.duckdb", **changes),
            runtime=runtime() if runtime is not None else None,
        )

    with server("lane") as lane, server("plain", express_lane=False) as plain:
        lane.wait_ready()
        plain.wait_ready()
        yield lane, plain


def chat_body(text: str = "hello", **extra: Any) -> dict[str, Any]:
    """A minimal chat request."""
    return {"model": "sim", "messages": [{"role": "user", "content": text}], **extra}


def node_view(c: httpx.Client, pid: str, node: str) -> dict[str, Any]:
    """``GET /v1/programs/{pid}/nodes/{node}``'s body (a ``Node``)."""
    answer: dict[str, Any] = c.get(f"/v1/programs/{pid}/nodes/{node}").json()
    return answer


def wait_until(predicate: Any, timeout: float = 10, interval: float = 0.02) -> None:
    """Poll ``predicate()`` until it is true (TimeoutError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(interval)
