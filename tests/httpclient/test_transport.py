"""The shared transports: the key on every request, error answers as exceptions, lenient
bodies, and the blocking and awaited transports behaving alike."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from agentconsole.httpclient import (
    ApiError,
    AsyncTransport,
    Call,
    NotFoundError,
    ServerError,
    SyncTransport,
    UnreachableError,
    segment,
)
from agentconsole.httpclient import jsonread as j


def _answer(status: int, content: bytes, seen: list[httpx.Request]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, content=content)

    return httpx.MockTransport(handler)


def _sync(status: int, content: bytes, seen: list[httpx.Request]) -> SyncTransport:
    http = httpx.Client(transport=_answer(status, content, seen))
    return SyncTransport("http://server/base/", "sk-x", http=http)


def _run_async(call: Call[Any], status: int, content: bytes, seen: list[httpx.Request]) -> Any:
    async def run() -> Any:
        http = httpx.AsyncClient(transport=_answer(status, content, seen))
        transport = AsyncTransport("http://server/base/", "sk-x", http=http)
        try:
            return await transport.send(call)
        finally:
            await transport.aclose()

    return asyncio.run(run())


CALL = Call("POST", f"/v1/things/{segment('a/b c')}", j.obj, {"x": 1}, {"limit": 2})


def test_both_transports_send_the_same_request() -> None:
    sync_seen: list[httpx.Request] = []
    async_seen: list[httpx.Request] = []
    assert _sync(200, b'{"ok": true}', sync_seen).send(CALL) == {"ok": True}
    assert _run_async(CALL, 200, b'{"ok": true}', async_seen) == {"ok": True}
    for request in (sync_seen[0], async_seen[0]):
        assert request.method == "POST"
        assert str(request.url) == "http://server/base/v1/things/a%2Fb%20c?limit=2"
        assert request.headers["authorization"] == "Bearer sk-x"
        assert request.headers["accept"] == "application/json"
        assert request.content == b'{"x":1}'


def test_an_empty_answer_decodes_as_an_empty_object() -> None:
    assert _sync(204, b"", []).send(CALL) == {}


@pytest.mark.parametrize("status", [200, 502])
def test_an_answer_that_is_not_json_is_an_api_error(status: int) -> None:
    with pytest.raises(ApiError) as sync_error:
        _sync(status, b"<html>proxy</html>", []).send(CALL)
    with pytest.raises(ApiError) as async_error:
        _run_async(CALL, status, b"<html>proxy</html>", [])
    for error in (sync_error.value, async_error.value):
        assert error.status == status
        assert isinstance(error, ServerError) == (status >= 500)


def test_an_error_answer_keeps_the_servers_type_and_message() -> None:
    body = b'{"error": {"type": "not_found", "message": "no program p9"}}'
    with pytest.raises(NotFoundError) as error:
        _sync(404, body, []).send(CALL)
    assert (error.value.status, error.value.type, error.value.message) == (
        404,
        "not_found",
        "no program p9",
    )
    assert str(error.value) == "404 not_found: no program p9"


def test_an_error_without_a_body_falls_back_to_the_reason() -> None:
    with pytest.raises(ServerError) as error:
        _sync(503, b"", []).send(CALL)
    assert error.value.message == "Service Unavailable"


def test_no_answer_is_left_to_the_caller_and_unreachable_reads_plainly() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    http = httpx.Client(transport=httpx.MockTransport(refuse))
    transport = SyncTransport("http://x", "k", http=http)
    with pytest.raises(httpx.ConnectError):
        transport.send(CALL)
    unreachable = UnreachableError("http://x: ConnectError")
    assert (unreachable.status, unreachable.type, str(unreachable)) == (
        0,
        "unreachable",
        "http://x: ConnectError",
    )


def test_a_session_carries_the_base_url_and_the_key() -> None:
    transport = SyncTransport("http://server/base/", "sk-x")
    with transport.session() as http:
        assert str(http.base_url) == "http://server/base/"
        assert http.headers["authorization"] == "Bearer sk-x"
    transport.close()
