"""The consoles' client of the HTTP API and the SSE feed (no other way into the server)."""

from __future__ import annotations

from agentconsole.ui.client.feed import EventBatch, FeedItem, FeedStatus, OverviewTick
from agentconsole.ui.client.http import ActionResult, ApiError, ConsoleApi, HttpConsoleClient

__all__ = [
    "ActionResult",
    "ApiError",
    "ConsoleApi",
    "EventBatch",
    "FeedItem",
    "FeedStatus",
    "HttpConsoleClient",
    "OverviewTick",
]
