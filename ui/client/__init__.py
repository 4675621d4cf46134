"""The consoles' client of the HTTP API and the SSE feed (no other way into the server), on
the transport, errors and JSON readers of :mod:`agentconsole.httpclient`."""

from __future__ import annotations

from agentconsole.httpclient import ApiError, UnreachableError
from agentconsole.ui.client.feed import EventBatch, FeedItem, FeedStatus, OverviewTick
from agentconsole.ui.client.http import ActionResult, ConsoleApi, HttpConsoleClient

__all__ = [
    "ActionResult",
    "ApiError",
    "ConsoleApi",
    "EventBatch",
    "FeedItem",
    "FeedStatus",
    "HttpConsoleClient",
    "OverviewTick",
    "UnreachableError",
]
