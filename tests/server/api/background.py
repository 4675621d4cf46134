"""What the cancel tests over real HTTP run beside the request they time: a gateway tool call
in a thread, the runner's commits held (a tool whose executor answered and whose result is
not committed yet) and a tool start held in its settle (a start a cancel overtakes); and the
server they run on, with the gateway's runner at hand."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from agentconsole.server.gateway import GatewayConfig, GatewayExtension
from agentconsole.server.gateway.runner import Runner
from tests.server.api.harness import LiveServer, make_config

#: the arguments of every background call (the loopback tools read nothing of them)
ARGUMENTS: dict[str, Any] = {"text": "row 7"}


@contextmanager
def served_with_runner(db: Path) -> Iterator[tuple[LiveServer, httpx.Client, Runner]]:
    """A ready server whose tenants may register a loopback ``http`` tool, a tenant's client,
    and the gateway's runner."""
    extension = GatewayExtension(
        GatewayConfig(tenant_builtins=None, allow_private_executor_urls=True)
    )
    with LiveServer(make_config(db), extensions=[extension]) as server:
        server.wait_ready()
        assert extension.gateway is not None
        with server.client() as c:
            yield server, c, extension.gateway.runner


def call_tool_in_background(
    server: LiveServer, tool: str, pid: str, node: str = "t1"
) -> tuple[threading.Thread, list[httpx.Response]]:
    """Call ``tool`` for ``node`` of ``pid`` through the gateway in a thread; the list gets its
    answer."""
    answers: list[httpx.Response] = []
    call = {"program_id": pid, "node_id": node, "arguments": ARGUMENTS}

    def run() -> None:
        with server.client() as c:
            answers.append(c.post(f"/v1/tools/{tool}/call", json=call))

    thread = threading.Thread(target=run)
    thread.start()
    return thread, answers


class HeldCommits:
    """The runner's intents with each commit held until :attr:`release` is set (after
    :attr:`reached`): a tool whose executor finished and waits for its commit."""

    def __init__(self, intents: Any) -> None:
        self._intents = intents
        self.reached = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._intents, name)

    def commit(self, *args: Any) -> concurrent.futures.Future[Any]:
        held: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def later() -> None:
            self.reached.set()
            self.release.wait(30)
            try:
                held.set_result(self._intents.commit(*args).result())
            except Exception as error:  # the runner sees the store's own failure
                held.set_exception(error)

        threading.Thread(target=later, daemon=True).start()
        return held


@contextmanager
def held_tool_start(server: LiveServer) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Hold the first tool start's own settle (``ToolPort.tool_started``: a cache hint to an
    engine may take a while) from ``reached`` until ``release``: (reached, release). The
    service's ``settled`` is restored after."""
    service = server.live.service
    real = service.settled
    reached, release = threading.Event(), threading.Event()

    async def held(actions: Any = None) -> None:
        if sys._getframe(1).f_code.co_name == "tool_started" and not reached.is_set():
            reached.set()
            while not release.is_set():
                await asyncio.sleep(0.01)
        await real(actions)

    service.settled = held  # type: ignore[method-assign]
    try:
        yield reached, release
    finally:
        release.set()
        service.settled = real  # type: ignore[method-assign]
