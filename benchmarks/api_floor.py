"""The floor under ``bench_api.py``'s API figures: Litestar handlers that do no service work, on
the HTTP stack ``serve`` runs (uvicorn with uvloop and httptools, serve's protocol and limits).

* ``bare``: the route reads the body and answers a canned chat completion (encoded once).
* ``shaped``: the route as ``/v1/chat/completions`` takes it (the validated
  ``ChatCompletionRequest``, the ``live`` and ``principal`` dependencies, the messages dumped)
  and answers the same completion as a ``Response`` with the call's headers.

    .venv/bin/python benchmarks/api_floor.py {bare,shaped} PORT
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import uvicorn
from litestar import Litestar, Request, Response, post
from litestar.di import Provide
from litestar.params import JSONBody

from agentconsole.server.api.auth import KeyRing, Principal
from agentconsole.server.api.connections import HttpLimits, uvicorn_options
from agentconsole.server.api.deps import LiveDep, PrincipalDep
from agentconsole.server.api.schemas import ChatCompletionRequest

ANSWER: dict[str, Any] = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1,
    "model": "sim",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "lorem" + " ipsum" * 15},
            "finish_reason": "length",
            "logprobs": None,
        }
    ],
    "usage": {"prompt_tokens": 40, "completion_tokens": 16, "total_tokens": 56},
    "agentconsole": {"program_id": "p", "node_id": "n", "call_id": "p/n/0001"},
}
HEADERS = {"X-Program-Id": "p", "X-Node-Id": "n", "X-Request-Id": "p-n-0001"}
_ENCODED = msgspec.json.encode(ANSWER)


@post("/v1/chat/completions", status_code=200)
async def bare(request: Request[Any, Any, Any]) -> bytes:
    """Read the body, answer the canned completion."""
    await request.body()
    return _ENCODED


@post("/v1/chat/completions", status_code=200)
async def shaped(
    request: Request[Any, Any, Any],
    data: JSONBody[ChatCompletionRequest],
    live: LiveDep,
    principal: PrincipalDep,
) -> Response[Any]:
    """What the real route does around the service, without the service."""
    del request, live, principal
    [m.model_dump(exclude_none=True) for m in data.messages]
    return Response(ANSWER, headers=HEADERS)


class _Live:
    keys = KeyRing({"sk-dev": "default"}, ())


def _live() -> type[_Live]:
    return _Live


def _principal(request: Request[Any, Any, Any], live: LiveDep) -> Principal:
    keys: KeyRing = live.keys
    return keys.resolve(request.headers.get("authorization"))


def create(kind: str) -> Litestar:
    """The floor app ``kind`` (``bare`` or ``shaped``)."""
    return Litestar(
        route_handlers=[bare if kind == "bare" else shaped],
        dependencies={
            "live": Provide(_live, sync_to_thread=False),
            "principal": Provide(_principal, sync_to_thread=False),
        },
        debug=False,
    )


@contextlib.contextmanager
def floor_server(kind: str) -> Iterator[tuple[str, int]]:
    """Run this module's ``kind`` server in a process; yields its host and port once it
    accepts connections, stops it afterwards."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    proc = subprocess.Popen([sys.executable, str(Path(__file__)), kind, str(port)], text=True)
    try:
        deadline = time.monotonic() + 30
        while not _accepts(port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {kind} floor server did not start")
            time.sleep(0.05)
        yield "127.0.0.1", port
    finally:
        proc.terminate()
        proc.wait(30)


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


if __name__ == "__main__":
    uvicorn.run(
        create(sys.argv[1]),
        host="127.0.0.1",
        port=int(sys.argv[2]),
        log_level="warning",
        access_log=False,
        **uvicorn_options(HttpLimits()),
    )
