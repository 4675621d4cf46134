"""The SDK's methods are written once (``calls.py``): the blocking and the awaited client
expose every builder with its signature and docstring, and send the same requests."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from agentconsole.client import AgentConsole, AsyncAgentConsole, calls
from agentconsole.client.endpoint import endpoint, every_page

BUILDERS = sorted(
    name
    for name, value in vars(calls).items()
    if inspect.isfunction(value) and not name.startswith("_") and value.__module__ == calls.__name__
)


def test_every_builder_is_a_method_of_both_clients() -> None:
    attributes = [item for cls in AgentConsole.__mro__ for item in vars(cls).items()]
    methods = {name for name, value in attributes if isinstance(value, endpoint | every_page)}
    # a listing read to its end takes no arguments: its builder's ``cursor`` is the client's
    pages = {name for name, value in attributes if isinstance(value, every_page)}
    assert sorted(methods) == BUILDERS
    blocking = AgentConsole("http://h", "k")
    awaited = AsyncAgentConsole("http://h", "k")
    for name in BUILDERS:
        builder: Callable[..., Any] = getattr(calls, name)
        sync_method, async_method = getattr(blocking, name), getattr(awaited, name)
        if name in pages:
            assert inspect.signature(sync_method).parameters == {}
            assert inspect.signature(async_method).parameters == {}
        else:
            assert inspect.signature(sync_method) == inspect.signature(builder)
            assert inspect.signature(async_method) == inspect.signature(builder)
        assert sync_method.__doc__ == async_method.__doc__ == builder.__doc__
        assert not inspect.iscoroutinefunction(sync_method)
        assert inspect.iscoroutinefunction(async_method)
    blocking.close()
    asyncio.run(awaited.aclose())


SCRIPT: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("create_program", ("p1",), {"labels": {"team": "a"}}),
    ("list_programs", (), {"state": "running", "limit": 5}),
    ("add_node", ("p1", "n1"), {"kind": "tool", "parents": ["n0"], "tool": "web"}),
    ("register_tool", ("t", {}, {"type": "agent"}), {"side_effect": True}),
    ("tool_finished", ("p1", "n1", "fail"), {"latency_s": 0.5}),
    ("boost", ("p1", 2.0), {}),
    ("reconcile", ("tc/1",), {"retry": True}),
    ("overview", (), {}),
]


def _recorder(seen: list[tuple[str, str, Any]]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        seen.append((request.method, str(request.url), body))
        return httpx.Response(200, json={})

    return httpx.MockTransport(handler)


@pytest.mark.parametrize(("name", "args", "kwargs"), SCRIPT, ids=[s[0] for s in SCRIPT])
def test_both_clients_send_the_same_request(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    sync_seen: list[tuple[str, str, Any]] = []
    async_seen: list[tuple[str, str, Any]] = []
    with AgentConsole("http://h", "k", http=httpx.Client(transport=_recorder(sync_seen))) as c:
        getattr(c, name)(*args, **kwargs)

    async def run() -> None:
        http = httpx.AsyncClient(transport=_recorder(async_seen))
        async with AsyncAgentConsole("http://h", "k", http=http) as console:
            await getattr(console, name)(*args, **kwargs)

    asyncio.run(run())
    assert sync_seen == async_seen
    assert len(sync_seen) == 1


def _tool(name: str) -> dict[str, Any]:
    return {"name": name, "owner": "t", "description": "", "parameters": {}, "executor": {}}


def test_list_tools_reads_every_page() -> None:
    """The server pages ``GET /v1/tools``; ``list_tools`` follows ``next_cursor`` to the end
    (both clients), so a caller that wants every tool still gets every tool."""
    pages = {
        None: {"tools": [_tool("a"), _tool("b")], "next_cursor": "c1"},
        "c1": {"tools": [_tool("c")], "next_cursor": "c2"},
        "c2": {"tools": [_tool("d")], "next_cursor": None},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/tools"
        return httpx.Response(200, json=pages[request.url.params.get("cursor")])

    transport = httpx.MockTransport(handler)
    with AgentConsole("http://h", "k", http=httpx.Client(transport=transport)) as console:
        assert [t.name for t in console.list_tools()] == ["a", "b", "c", "d"]
        first = console.tool_page(limit=2)
        assert ([t.name for t in first.tools], first.next_cursor) == (["a", "b"], "c1")

    async def run() -> list[str]:
        http = httpx.AsyncClient(transport=transport)
        async with AsyncAgentConsole("http://h", "k", http=http) as console:
            return [t.name for t in await console.list_tools()]

    assert asyncio.run(run()) == ["a", "b", "c", "d"]
