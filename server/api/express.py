"""The express lane: the two generation routes without Litestar's per-request machinery.

Every call of every program is a ``POST /v1/chat/completions`` or ``/v1/completions``, and
Litestar's routing, dependency resolution, body extraction and response building cost the
serving thread about as much CPU as the program service behind them (docs/BENCHMARKS.md
section 7). The lane sits in front of Litestar's router (``Litestar.asgi_handler``: app-level
middleware would run after routing) and answers the *plain* call itself, with the functions
the controllers call (``chat_completion``, ``text_completion``): the route's exact path (no
``root_path``), a valid ``Host``, a whole body within the size limit that decodes, passes the
JSON guard (``jsonguard.py``) and the route's model as Litestar validates it (strict), a key
``KeyRing.resolve`` accepts (what the ``principal`` provider asks). A JSON answer is sent as
bytes; a stream is Litestar's own ``Stream`` response, sent as the route would send it.

Anything else (a refused key, a body Litestar would refuse, any other route) goes to
Litestar untouched, with the body the lane read replayed, so every refusal is Litestar's own
answer as before. Once a call is in the service, an error is answered by the app's one
exception handler (``errors.handle_error``), as Litestar would.

The lane is installed only where Litestar would do nothing else per request on these routes
(:func:`lane_fits`: no guards, middleware, hooks, CORS, allowed hosts, extra response headers,
replaced providers, other exception handlers, other body limit), so an app that adds any of
them runs without it.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Litestar, Response
from litestar.enums import ScopeType
from litestar.handlers import HTTPRouteHandler
from litestar.routes import HTTPRoute
from litestar.types import ASGIApp, Receive, ReceiveMessage, Scope, Send
from pydantic import BaseModel

from agentconsole.server.api.auth import Principal
from agentconsole.server.api.callflow import Client, HeaderLookup, Reply
from agentconsole.server.api.chat import ChatController, chat_completion
from agentconsole.server.api.completions import CompletionsController, text_completion
from agentconsole.server.api.deps import DEPENDENCIES, Live
from agentconsole.server.api.errors import handle_error
from agentconsole.server.api.jsonguard import json_problem
from agentconsole.server.api.schemas import ChatCompletionRequest, CompletionRequest

Answer = Callable[[Client, Any, Live, Principal], Awaitable[Reply | Response[Any]]]
#: a ``Host`` Litestar's router accepts: RFC 3986's reg-name, IP literal and port characters
_VALID_HOST = re.compile(rb"[0-9A-Za-z!$&'()*+,;=\-._~:\[\]@%]*")
_decode = msgspec.json.decode


@dataclass(frozen=True, slots=True)
class LaneRoute:
    """A route the lane answers: its body model, the function that answers it, and the
    controller handler Litestar routes it to (the lane is installed only if it still does)."""

    model: type[BaseModel]
    answer: Answer
    controller: HTTPRouteHandler


CHAT = LaneRoute(ChatCompletionRequest, chat_completion, ChatController.create)
COMPLETIONS = LaneRoute(CompletionRequest, text_completion, CompletionsController.create)
ROUTES = {"/v1/chat/completions": CHAT, "/v1/completions": COMPLETIONS}


class ScopeHeaders:
    """A request's headers by name, the first of repeated ones (as Litestar's
    ``Headers.get``). ASGI gives header names in lower case; names asked are lower-cased."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        self._raw = raw

    def get(self, key: str, /) -> str | None:
        name = key.lower().encode("latin-1")
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
        if (
            route is None
            or scope["type"] != ScopeType.HTTP
            or scope["method"] != "POST"
            or scope.get("root_path")
        ):
            await self._inner(scope, receive, send)
            return
        client = LaneClient(scope, receive)
        if not self._head_is_plain(client):
            await self._inner(scope, receive, send)  # Litestar answers it, the body unread
            return
        messages, body = await _read_body(receive, self._max_body_bytes)
        live: Live = self._app.state.live
        plain = None if body is None else _plain(route, body, client, live)
        if plain is None:
            await self._inner(scope, _replay(messages, receive), send)
            return
        data, principal = plain
        self.answered += 1
        answer: Reply | Response[Any] | Exception
        try:
            answer = await route.answer(client, data, live, principal)
        except Exception as error:
            answer = error
        if isinstance(answer, Reply):
            await _send_reply(send, answer)
            return
        # a stream (its background task abandons the call if the client leaves) or an error:
        # Litestar's own response, as the route would send it
        request = self._app.request_class(scope, receive, send)
        if isinstance(answer, Exception):
            answer = handle_error(request, answer)
        await answer.to_asgi_response(None, request)(scope, receive, send)

    def _head_is_plain(self, client: LaneClient) -> bool:
        """A valid ``Host`` (else Litestar answers 400) and a ``Content-Length``, if any, of
        digits within the limit (else Litestar answers 400 or 413)."""
        host = client.headers.get("host")
        if host is not None and _VALID_HOST.fullmatch(host.encode("latin-1")) is None:
            return False
        length = client.headers.get("content-length")
        if length is None:
            return True
        return length.isascii() and length.isdigit() and int(length) <= self._max_body_bytes


def _plain(
    route: LaneRoute, body: bytes, client: LaneClient, live: Live
) -> tuple[Any, Principal] | None:
    """The validated body and the caller of a plain call, or None for Litestar to answer."""
    try:
        value = _decode(body)
        if json_problem(value) is not None:
            return None
        data = route.model.model_validate(value, strict=True)  # as Litestar's pydantic plugin
        principal = live.keys.resolve(client.headers.get("authorization"))
    except Exception:  # whatever refuses it, Litestar's answer is the one to give
        return None
    return data, principal


async def _read_body(receive: Receive, limit: int) -> tuple[list[ReceiveMessage], bytes | None]:
    """The messages read and the whole body; None for the body when the client left or the
    body passed ``limit`` (the rest is left unread for Litestar)."""
    messages: list[ReceiveMessage] = []
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return messages, None
        if not message.get("more_body", False):
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


def lane_fits(app: Litestar, max_body_bytes: int) -> bool:
    """True when, for the lane's routes, Litestar would run nothing per request that the lane
    skips: each path still routes POST to its controller method, with no guards, middleware,
    hooks, extra response headers or cookies, the default ``live`` and ``principal``
    providers, the app's one exception handler and ``max_body_bytes`` as its limit; and the
    app has no CORS, allowed hosts, before-send or after-exception hooks."""
    if app.cors_config is not None or app.allowed_hosts or app.before_send or app.after_exception:
        return False
    handlers = {
        path: handler
        for route in app.routes
        if isinstance(route, HTTPRoute) and (path := route.path) in ROUTES
        for handler in route.route_handlers
        if "POST" in handler.http_methods
    }
    if app.exception_handlers.get(Exception) is not handle_error:
        return False
    return all(
        path in handlers
        and _handler_fits(handlers[path], lane, max_body_bytes, app.exception_handlers)
        for path, lane in ROUTES.items()
    )


def _handler_fits(
    handler: HTTPRouteHandler,
    lane: LaneRoute,
    max_body_bytes: int,
    app_handlers: Mapping[Any, Any],
) -> bool:
    dependencies = handler.resolve_dependencies()
    return (
        getattr(handler.fn, "__func__", handler.fn) is lane.controller.fn
        and not handler.resolve_guards()
        and not handler.resolve_middleware()
        and handler.resolve_before_request() is None
        and handler.resolve_after_response() is None
        and not any(getattr(layer, "after_request", None) for layer in handler.ownership_layers)
        and not handler.resolve_response_headers()
        and not handler.resolve_response_cookies()
        and handler.resolve_request_max_body_size() == max_body_bytes
        # the app's handlers only (``handle_error`` for every exception of ours)
        and handler.resolve_exception_handlers() == app_handlers
        and all(dependencies.get(name) is DEPENDENCIES[name] for name in ("live", "principal"))
    )
