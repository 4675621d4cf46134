"""The express lane (``server/api/express.py``) answers plain generation calls itself and
everything else through Litestar, and a client cannot tell: each request below is sent to a
server with the lane and to one without it (``express_lane=False``), and the answers agree."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Request, Response
from litestar.config.cors import CORSConfig

from agentconsole.server.api.express import ExpressLane, _read_body, _replay, lane_fits
from agentconsole.settings import load_settings
from tests.server.api.harness import LiveServer, both_lanes, chat_body

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
#: what differs between two answers to the same call: its ids and clock
VARYING_HEADERS = {"date", "x-request-id", "x-program-id", "x-node-id", "content-length"}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, LiveServer]]:
    with both_lanes(Path(tmp_path_factory.mktemp("express"))) as servers:
        yield servers


def lane_of(server: LiveServer) -> ExpressLane:
    handler = server.app.asgi_handler
    assert isinstance(handler, ExpressLane)
    return handler


def send(
    server: LiveServer, path: str, body: Any, key: str | None = "sk-a", **headers: str
) -> httpx.Response:
    """POST ``body`` (JSON, or bytes as they are) with ``key`` and ``headers``."""
    content = body if isinstance(body, bytes) else httpx.Request("POST", "/", json=body).content
    headers = {"content-type": "application/json", **headers}
    with server.client(key) as client:
        return client.post(path, content=content, headers=headers)


def shape(value: Any) -> Any:
    """``value`` with every leaf replaced by its type (ids, times and texts differ per call)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return type(value).__name__


def answered_alike(
    servers: tuple[LiveServer, LiveServer], path: str, body: dict[str, Any]
) -> tuple[httpx.Response, httpx.Response]:
    """``body`` sent to both servers: the lane answered it itself, both with 200 and the same
    header names (but for those of the call's ids and clock); both answers."""
    lane, plain = servers
    before = lane_of(lane).answered
    ours, theirs = send(lane, path, body), send(plain, path, body)
    assert lane_of(lane).answered == before + 1
    assert ours.status_code == theirs.status_code == 200
    names = [n for n in ours.headers if n not in VARYING_HEADERS]
    assert names == [n for n in theirs.headers if n not in VARYING_HEADERS]
    return ours, theirs


def test_the_lane_is_off_when_configured_so(servers: tuple[LiveServer, LiveServer]) -> None:
    lane, plain = servers
    assert isinstance(lane.app.asgi_handler, ExpressLane)
    assert not isinstance(plain.app.asgi_handler, ExpressLane)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, chat_body("hi", max_tokens=5)),
        (CHAT, chat_body("hi", max_tokens=5, agentconsole={"program_id": "xp-1"})),
        (COMPLETIONS, {"model": "sim", "prompt": "once upon", "max_tokens": 5}),
    ],
    ids=["chat", "chat-in-program", "completion"],
)
def test_a_plain_call_is_answered_by_the_lane_as_litestar_answers_it(
    servers: tuple[LiveServer, LiveServer], path: str, body: dict[str, Any]
) -> None:
    ours, theirs = answered_alike(servers, path, body)
    assert shape(ours.json()) == shape(theirs.json())
    assert ours.json()["usage"] == theirs.json()["usage"]
    assert ours.headers["content-type"] == theirs.headers["content-type"] == "application/json"
    assert int(ours.headers["content-length"]) == len(ours.content)
    assert {"x-program-id", "x-node-id", "x-request-id"} <= set(ours.headers)


DEEP: dict[str, Any] = {"a": None}
for _ in range(80):
    DEEP = {"a": DEEP}

# (name, path, body, key, extra headers): each answered by Litestar (the lane passes it on)
PASSED_ON: list[tuple[str, str, Any, str | None, dict[str, str]]] = [
    ("no key", CHAT, chat_body(), None, {}),
    ("unknown key", CHAT, chat_body(), "sk-nope", {}),
    ("malformed json", CHAT, b"{not json", "sk-a", {}),
    ("empty body", CHAT, b"", "sk-a", {}),
    ("json array", CHAT, [1, 2], "sk-a", {}),
    ("schema", CHAT, chat_body(max_tokens=0), "sk-a", {}),
    ("strict types", CHAT, chat_body(max_tokens="5"), "sk-a", {}),
    ("too deep", CHAT, chat_body(agentconsole={"labels": DEEP}), "sk-a", {}),
    ("huge integer", CHAT, chat_body(max_tokens=2**70), "sk-a", {}),
    ("completion schema", COMPLETIONS, {"model": "sim"}, "sk-a", {}),
]


@pytest.mark.parametrize(
    ("path", "body", "key", "headers"),
    [case[1:] for case in PASSED_ON],
    ids=[case[0] for case in PASSED_ON],
)
def test_what_the_lane_cannot_answer_litestar_answers_unchanged(
    servers: tuple[LiveServer, LiveServer],
    path: str,
    body: Any,
    key: str | None,
    headers: dict[str, str],
) -> None:
    lane, plain = servers
    before = lane_of(lane).answered
    ours, theirs = send(lane, path, body, key, **headers), send(plain, path, body, key, **headers)
    assert lane_of(lane).answered == before
    assert 400 <= ours.status_code < 500
    assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())
    assert ours.headers.get("www-authenticate") == theirs.headers.get("www-authenticate")


@pytest.mark.parametrize("announced", [True, False], ids=["content-length", "chunked"])
def test_an_oversized_body_is_refused_by_litestar(
    servers: tuple[LiveServer, LiveServer], announced: bool
) -> None:
    lane, _ = servers
    before = lane_of(lane).answered
    body = httpx.Request("POST", "/", json=chat_body("x" * (5 * 1024 * 1024))).content
    answers = []
    for server in servers:
        with server.client("sk-a") as client:
            content = body if announced else iter([body[:1024], body[1024:]])
            answers.append(client.post(CHAT, content=content))
    ours, theirs = answers
    assert lane_of(lane).answered == before
    assert ours.status_code == 413
    assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())


def test_an_invalid_host_is_refused_by_litestar(servers: tuple[LiveServer, LiveServer]) -> None:
    lane, _ = servers
    before = lane_of(lane).answered
    ours, theirs = (send(s, CHAT, chat_body(max_tokens=3), "sk-a", host="a b") for s in servers)
    assert lane_of(lane).answered == before
    assert ours.status_code == 400
    assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())


def test_the_setting_turns_the_lane_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().server_config().express_lane
    monkeypatch.setenv("AGENTCONSOLE_SERVER__EXPRESS_LANE", "false")
    assert not load_settings().server_config().express_lane


def other_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    return Response({})


def test_the_lane_is_installed_only_where_litestar_would_do_nothing_else(
    servers: tuple[LiveServer, LiveServer],
) -> None:
    app = servers[1].app  # the lane off: the app as Litestar built it
    limit = servers[1].live.config.max_body_bytes
    assert lane_fits(app, limit)
    assert not lane_fits(app, limit + 1)  # the routes' body limit is another one
    app.cors_config = CORSConfig()
    try:
        assert not lane_fits(app, limit)
    finally:
        app.cors_config = None
    handlers = app.exception_handlers
    app.exception_handlers = {**handlers, Exception: other_handler}
    try:
        assert not lane_fits(app, limit)  # errors would not be answered as the lane answers
    finally:
        app.exception_handlers = handlers
    assert lane_fits(app, limit)


def test_a_refusal_once_the_call_is_in_the_service_is_the_apps_answer(
    servers: tuple[LiveServer, LiveServer],
) -> None:
    """A valid body and key reach the service; what it refuses (here a program of another
    tenant, a header id the route refuses) is answered by the app's exception handler."""
    lane, plain = servers
    for server in servers:
        first = send(server, CHAT, chat_body(agentconsole={"program_id": "xp-owned"}), "sk-b")
        assert first.status_code == 200
    before = lane_of(lane).answered
    body = chat_body(agentconsole={"program_id": "xp-owned"})
    ours, theirs = send(lane, CHAT, body), send(plain, CHAT, body)
    assert lane_of(lane).answered == before + 1
    assert ours.status_code == 404
    assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())
    ours, theirs = (send(s, CHAT, chat_body(), "sk-a", **{"X-Program-Id": "a b"}) for s in servers)
    # an invalid request on OpenAI's route: OpenAI's 400, on either path
    assert ours.status_code == 400
    assert (ours.json()["error"]["type"], ours.json()["error"]["param"]) == (
        "invalid_request_error",
        "x-program-id",
    )
    assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())
    # a body the lane leaves to Litestar (it validates it) is answered alike
    ours, theirs = (send(s, CHAT, chat_body(temperature=3)) for s in servers)
    assert (ours.status_code, ours.json()["error"]["param"]) == (400, "temperature")
    assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())


def frames(answer: httpx.Response) -> list[Any]:
    """The SSE frames of a streamed answer, JSON decoded (``[DONE]`` as it is)."""
    lines = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, chat_body("hi", max_tokens=4, stream=True)),
        (CHAT, chat_body("hi", max_tokens=4, stream=True, stream_options={"include_usage": True})),
        (COMPLETIONS, {"model": "sim", "prompt": "once", "max_tokens": 4, "stream": True}),
    ],
    ids=["chat", "chat-usage", "completion"],
)
def test_a_stream_is_answered_by_the_lane_as_litestar_streams_it(
    servers: tuple[LiveServer, LiveServer], path: str, body: dict[str, Any]
) -> None:
    ours, theirs = answered_alike(servers, path, body)
    assert ours.headers["content-type"] == theirs.headers["content-type"]
    assert ours.headers["content-type"].startswith("text/event-stream")
    assert [shape(f) for f in frames(ours)] == [shape(f) for f in frames(theirs)]
    assert frames(ours)[-1] == "[DONE]"


# -- the body reader and the replay -----------------------------------------------------------
def test_a_body_in_several_messages_is_read_whole_and_replayed_in_order() -> None:
    parts = [
        {"type": "http.request", "body": b'{"a":', "more_body": True},
        {"type": "http.request", "body": b"1}", "more_body": False},
        {"type": "http.disconnect"},
    ]
    queue = list(parts)

    async def receive() -> Any:
        return queue.pop(0)

    async def scenario() -> tuple[bytes | None, list[Any]]:
        messages, body = await _read_body(receive, 1024)
        again = _replay(messages, receive)
        return body, [await again() for _ in range(3)]

    body, replayed = asyncio.run(scenario())
    assert body == b'{"a":1}'
    assert replayed == parts  # the two read, then the one the client sent next


def test_a_request_message_without_a_body_reads_as_empty() -> None:
    async def receive() -> Any:
        return {"type": "http.request"}

    assert asyncio.run(_read_body(receive, 1024))[1] == b""


@pytest.mark.parametrize(
    ("parts", "limit"),
    [
        ([{"type": "http.request", "body": b"x" * 10, "more_body": True}], 5),
        ([{"type": "http.disconnect"}], 1024),
    ],
    ids=["over the limit", "client left"],
)
def test_no_body_when_over_the_limit_or_the_client_left(parts: list[Any], limit: int) -> None:
    queue = list(parts)

    async def receive() -> Any:
        return queue.pop(0)

    messages, body = asyncio.run(_read_body(receive, limit))
    assert body is None
    assert messages == parts
