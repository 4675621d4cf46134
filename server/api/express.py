"""The express lane: the two generation routes without Litestar's per-request machinery.

Every call of every program is a ``POST /v1/chat/completions`` or ``/v1/completions``, and
Litestar's routing, dependency resolution, body extraction and response building cost the
serving thread about as much CPU as the program service behind them (docs/BENCHMARKS.md
section 7). The lane sits in front of Litestar's router (``Litestar.asgi_handler``: app-level
middleware would run after routing) and answers the *plain* call itself, with the functions
the controllers call (``chat_completion``, ``text_completion``): a whole body within the size
limit that decodes, passes the JSON guard (``jsonguard.py``) and the route's model as Litestar
validates it (strict), a valid key, no ``stream``.

Anything else (a refused key, a body Litestar would refuse, a stream, any other route) goes to
Litestar untouched, with the body the lane read replayed, so every refusal and every stream is
Litestar's own answer as before. Once a call is in the service an error is answered by the
app's one exception handler (``errors.handle_error``), as Litestar would.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Litestar, Response
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, ReceiveMessage, Scope, Send
from pydantic import BaseModel, ValidationError

from agentconsole.server.api.auth import Principal
from agentconsole.server.api.callflow import HeaderLookup, Reply
from agentconsole.server.api.chat import chat_completion
from agentconsole.server.api.completions import text_completion
from agentconsole.server.api.deps import Live
from agentconsole.server.api.errors import ApiError, handle_error
from agentconsole.server.api.jsonguard import json_problem
from agentconsole.server.api.schemas import ChatCompletionRequest, CompletionRequest

Answer = Callable[[Any, Any, Live, Principal], Awaitable[Reply | Response[Any]]]


@dataclass(frozen=True, slots=True)
class LaneRoute:
    """A route the lane answers: its body model and the function that answers it."""

    model: type[BaseModel]
    answer: Answer


ROUTES = {
    "/v1/chat/completions": LaneRoute(ChatCompletionRequest, chat_completion),
    "/v1/completions": LaneRoute(CompletionRequest, text_completion),
}
_decode = msgspec.json.decode


class ScopeHeaders:
    """A request's headers by lower-case name, the first of repeated ones (as Litestar's
    ``Headers.get``); ASGI servers give the names in lower case."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Any) -> None:
        self._raw: list[tuple[bytes, bytes]] = raw

    def get(self, key: str, /) -> str | None:
        name = key.encode("latin-1")
        for raw_name, value in self._raw:
            if raw_name == name:
                return value.decode("latin-1")
        return None


class LaneClient:
    """The :class:`~agentconsole.server.api.callflow.Client` of a call the lane answers."""

    __slots__ = ("headers", "receive")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.headers: HeaderLookup = ScopeHeaders(scope["headers"])
        self.receive: Receive = receive


class ExpressLane:
    """An ASGI app answering plain generation calls and passing the rest to ``inner``
    (Litestar's router); :attr:`answered` counts the calls it answered itself."""

    def __init__(self, app: Litestar, inner: ASGIApp, max_body_bytes: int) -> None:
        self._app = app
        self._inner = inner
        self._max_body_bytes = max_body_bytes
        self.answered = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = ROUTES.get(scope["path"])
        if route is None or scope["type"] != ScopeType.HTTP or scope["method"] != "POST":
            await self._inner(scope, receive, send)
            return
        client = LaneClient(scope, receive)
        if self._announced_too_large(client):
            await self._inner(scope, receive, send)  # Litestar answers 413 unread
            return
        messages, body = await _read_body(receive, self._max_body_bytes)
        live: Live = self._app.state.live
        plain = None if body is None else _plain(route, body, client, live)
        if plain is None:
            await self._inner(scope, _replay(messages, receive), send)
            return
        data, principal = plain
        self.answered += 1
        try:
            answer = await route.answer(client, data, live, principal)
        except Exception as error:  # answered as the app's exception handler answers it
            await self._error(scope, receive, send, error)
            return
        if not isinstance(answer, Reply):  # _plain passes no stream
            raise TypeError(f"the express lane got a {type(answer).__name__}, not a Reply")
        await _send_reply(send, answer)

    def _announced_too_large(self, client: LaneClient) -> bool:
        length = client.headers.get("content-length")
        return length is not None and length.isdigit() and int(length) > self._max_body_bytes

    async def _error(self, scope: Scope, receive: Receive, send: Send, error: Exception) -> None:
        request = self._app.request_class(scope, receive, send)
        response = handle_error(request, error)
        await response.to_asgi_response(None, request)(scope, receive, send)


def _plain(
    route: LaneRoute, body: bytes, client: LaneClient, live: Live
) -> tuple[Any, Principal] | None:
    """The validated body and the caller of a plain call, or None for Litestar to answer."""
    try:
        value = _decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if json_problem(value) is not None:
        return None
    try:
        data = route.model.model_validate(value, strict=True)  # as Litestar's pydantic plugin
    except ValidationError:
        return None
    if getattr(data, "stream", False):
        return None
    try:
        principal = live.keys.resolve(client.headers.get("authorization"))
    except ApiError:
        return None
    return data, principal


async def _read_body(receive: Receive, limit: int) -> tuple[list[ReceiveMessage], bytes | None]:
    """The messages read and the whole body; None for the body when the client left or the
    body passed ``limit`` (the rest is left unread for Litestar)."""
    messages: list[ReceiveMessage] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        size += len(message.get("body", b""))
        if size > limit:
            return messages, None
        if not message.get("more_body", False):
            break
    chunks = [m["body"] for m in messages if m["type"] == "http.request"]
    return messages, chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _replay(messages: list[ReceiveMessage], receive: Receive) -> Receive:
    """A receive channel giving ``messages`` again, then what ``receive`` gives."""
    pending = deque(messages)

    async def again() -> ReceiveMessage:
        return pending.popleft() if pending else await receive()

    return again


async def _send_reply(send: Send, reply: Reply) -> None:
    """``reply`` as Litestar's ``Response`` sends it: its headers, then the content type and
    length."""
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in reply.headers.items()
    ]
    headers.append((b"content-type", b"application/json"))
    headers.append((b"content-length", str(len(reply.body)).encode()))
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body, "more_body": False})
