"""The plugin's endpoint in a worker's SGLang HTTP server: operator settings in, reports out.

A worker started with ``python -m sglang.launch_server`` from this environment loads the
plugin in every process (``sglang.srt.plugins`` entry point). In the HTTP server's process,
and only when ``AGENTCONSOLE_SGLANG_NODE_API=1`` (``launch.worker_env`` sets it), the plugin adds
two routes to SGLang's FastAPI app, so a control plane on another node needs no shared files:

* ``POST /agentconsole/control``: the control plane's ``ControlState`` (its JSON), written to
  this node's ``control.json``, which the node's schedulers poll as with the in-process engine.
* ``GET /agentconsole/status``: every rank's ``status`` and ``placement`` files of this node,
  in rank order (``null`` for a file not written yet), and the node's id.
* every response carries the node's id in ``X-Agentconsole-Node``; sglang-router passes the
  worker's response headers through, so the control plane learns which worker served a call.

The files stay the channel between SGLang's processes on one node (see ``control``); the
endpoint only carries them across nodes. Routes are added at plugin load, before SGLang's
server starts (``sglang.launch_server`` calls ``load_plugins()`` first).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import re
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from agentconsole.server.runtime.sglang.control import (
    CONTROL_FILE,
    PLACEMENT_FILE,
    STATUS_FILE,
    ControlState,
    read_json,
    stamp,
    write_json_atomic,
)

NODE_API_ENV = "AGENTCONSOLE_SGLANG_NODE_API"
CONTROL_PATH = "/agentconsole/control"
STATUS_PATH = "/agentconsole/status"
_HTTP_SERVER = "sglang.srt.entrypoints.http_server"
NODE_HEADER = "X-Agentconsole-Node"
_RANKED = re.compile(r"\.rank(\d+)\.")
_Message = MutableMapping[str, Any]
_Asgi = Callable[
    [_Message, Callable[[], Awaitable[_Message]], Callable[[_Message], Awaitable[None]]],
    Awaitable[None],
]


class NodeHeader:
    """ASGI middleware: every HTTP response names the node (pure ASGI, so SGLang's streams
    and its abort on a client disconnect pass through untouched)."""

    def __init__(self, app: _Asgi, node: str) -> None:
        self.app = app
        self.header = (NODE_HEADER.lower().encode(), node.encode())

    async def __call__(
        self,
        scope: _Message,
        receive: Callable[[], Awaitable[_Message]],
        send: Callable[[_Message], Awaitable[None]],
    ) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return

        async def tagged(message: _Message) -> None:
            if message.get("type") == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, tagged)


def rank_files(state_dir: Path, name: str) -> list[Path]:
    """The files ``name`` of every rank in ``state_dir``, in rank order (``status.json``
    alone without data parallelism, else ``status.rank0.json``, ``status.rank1.json``, …)."""
    stem, _, suffix = name.partition(".")
    ranked = list(state_dir.glob(f"{stem}.rank*.{suffix}"))
    if ranked:
        return sorted(ranked, key=lambda p: int(m.group(1)) if (m := _RANKED.search(p.name)) else 0)
    return [state_dir / name]


def node_report(state_dir: Path, node: str = "") -> dict[str, Any]:
    """What ``GET /agentconsole/status`` answers: each rank's status and placement."""
    return {
        "node": node,
        "statuses": [read_json(p) for p in rank_files(state_dir, STATUS_FILE)],
        "placements": [read_json(p) for p in rank_files(state_dir, PLACEMENT_FILE)],
    }


def apply_control(state_dir: Path, data: dict[str, Any]) -> int:
    """Write the control plane's state to this node's ``control.json``; its version."""
    state = ControlState.from_json(data)  # validates, and drops what this version lacks
    # this node's tensor-parallel ranks switch at a pass planned from this node's own status,
    # and the file carries the earlier versions still pending (a rank that missed one applies
    # it at its pass as the others do: ``control.stamp``)
    before = read_json(state_dir / CONTROL_FILE)
    write_json_atomic(state_dir / CONTROL_FILE, stamp(state, state_dir, before))
    return state.version


def install_if_enabled(state_dir: Path) -> bool:
    """Add the routes to SGLang's HTTP app when this is a worker's server process (see the
    module docstring); True when they were added."""
    if os.environ.get(NODE_API_ENV) != "1" or multiprocessing.parent_process() is not None:
        return False
    app = importlib.import_module(_HTTP_SERVER).app
    node = f"{socket.gethostname()}:{os.getpid()}"

    async def control(request: Any) -> dict[str, int]:
        return {"version": apply_control(state_dir, dict(await request.json()))}

    async def status() -> dict[str, Any]:
        return node_report(state_dir, node)

    request_cls = importlib.import_module("fastapi").Request
    control.__annotations__["request"] = request_cls  # FastAPI injects by annotation
    app.add_api_route(CONTROL_PATH, control, methods=["POST"])
    app.add_api_route(STATUS_PATH, status, methods=["GET"])
    app.add_middleware(NodeHeader, node=node)
    return True
