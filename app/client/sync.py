"""The blocking client: ``AgentConsole(base_url, api_key)``; every method is one request.

Error answers are raised as :mod:`agentconsole.httpclient.errors` exceptions (exported by
:mod:`agentconsole.client`), network trouble as ``httpx.HTTPError``. Use as a context manager or
call :meth:`AgentConsole.close`. The asynchronous twin is
:class:`agentconsole.client.aio.AsyncAgentConsole` (the same methods, awaited).
"""

from __future__ import annotations

import httpx

from agentconsole.client.base import ClientBase
from agentconsole.httpclient import DEFAULT_TIMEOUT_S, SyncTransport


class AgentConsole(ClientBase):
    """A blocking client over one ``httpx.Client`` (pass ``http`` to supply your own)."""

    _transport: SyncTransport

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        http: httpx.Client | None = None,
    ) -> None:
        self._transport = SyncTransport(base_url, api_key, timeout=timeout, http=http)

    def close(self) -> None:
        """Close the connection pool."""
        self._transport.close()

    def __enter__(self) -> AgentConsole:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
