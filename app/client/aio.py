"""The asynchronous client: ``AsyncAgentConsole(base_url, api_key)``, the same methods as
:class:`agentconsole.client.sync.AgentConsole`, awaited."""

from __future__ import annotations

import httpx

from agentconsole.client.base import ClientBase
from agentconsole.httpclient import DEFAULT_TIMEOUT_S, AsyncTransport


class AsyncAgentConsole(ClientBase):
    """A client over one ``httpx.AsyncClient`` (pass ``http`` to supply your own)."""

    _transport: AsyncTransport

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._transport = AsyncTransport(base_url, api_key, timeout=timeout, http=http)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncAgentConsole:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
