"""Sending a :class:`~agentconsole.httpclient.call.Call` with a bearer key, blocking or awaited.

Both transports add the key to every request, raise the API's error answers as
:mod:`agentconsole.httpclient.errors` exceptions (an answer that is not JSON too) and decode the
rest with the call's parser. Network trouble is left as ``httpx.HTTPError``: the caller decides
what no answer means (the SDK raises it, the consoles show "unreachable").
"""

from __future__ import annotations

from typing import Any, TypeVar

import httpx

from agentconsole.httpclient.call import Call
from agentconsole.httpclient.errors import ApiError, error_for

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 60.0


def auth_headers(api_key: str) -> dict[str, str]:
    """The header that authenticates a request as ``api_key``'s tenant (or operator)."""
    return {"Authorization": f"Bearer {api_key}"}


def decode(call: Call[T], response: httpx.Response) -> T:
    """The parsed answer to ``call``; raises the :class:`ApiError` of an error answer, or of a
    2xx answer whose body is not JSON."""
    if response.status_code >= 400:
        raise error_for(response)
    if not response.content:
        return call.parse({})
    try:
        data: Any = response.json()
    except ValueError:
        raise ApiError(response.status_code, "bad_response", "the answer is not JSON") from None
    return call.parse(data)


class Transport:
    """Where requests go and with which key: what both transports share."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key

    @property
    def headers(self) -> dict[str, str]:
        """Every request's headers: the key, and JSON wanted back."""
        return {**auth_headers(self.api_key), "Accept": "application/json"}

    def url(self, call: Call[Any]) -> str:
        """The absolute URL of ``call``."""
        return self.base_url + call.path


class SyncTransport(Transport):
    """Blocking requests over one ``httpx.Client`` (pass ``http`` to supply your own)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        http: httpx.Client | None = None,
    ) -> None:
        super().__init__(base_url, api_key)
        self.timeout = timeout
        self.http = http or httpx.Client(timeout=timeout)

    def send(self, call: Call[T]) -> T:
        """Send ``call`` and decode its answer (see :func:`decode`)."""
        response = self.http.request(
            call.method, self.url(call), json=call.json, params=call.params,
            headers={**self.headers, **call.headers},
        )  # fmt: skip
        return decode(call, response)

    def session(self) -> httpx.Client:
        """A new client of its own on the base URL with the key (a long-lived stream holds
        its connection for as long as it runs); the caller closes it."""
        return httpx.Client(base_url=self.base_url, headers=self.headers, timeout=self.timeout)

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()


class AsyncTransport(Transport):
    """Awaited requests over one ``httpx.AsyncClient`` (pass ``http`` to supply your own)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(base_url, api_key)
        self.http = http or httpx.AsyncClient(timeout=timeout)

    async def send(self, call: Call[T]) -> T:
        """Send ``call`` and decode its answer (see :func:`decode`)."""
        response = await self.http.request(
            call.method, self.url(call), json=call.json, params=call.params,
            headers={**self.headers, **call.headers},
        )  # fmt: skip
        return decode(call, response)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()
