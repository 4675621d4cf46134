"""The client side of the HTTP API, shared by the Python SDK (``agentconsole.client``) and the
consoles' client (``agentconsole.ui.client``): requests as data (:class:`Call`), the bearer-key
transports (blocking and awaited), the error answers as exceptions, lenient JSON readers
(:mod:`.jsonread`) and the Server-Sent Events parser (:mod:`.sse`).

It speaks HTTP only and imports nothing else of the project (the import contracts in
``pyproject.toml`` keep it so), so the consoles can use it without touching the server.
"""

from __future__ import annotations

from agentconsole.httpclient.call import JSON, Call, drop_none, segment
from agentconsole.httpclient.errors import (
    ApiError,
    AuthenticationError,
    ConflictError,
    IdempotencyMismatchError,
    InProgressError,
    NeedsReconcileError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitError,
    ServerError,
    ToolFailedError,
    UnreachableError,
    ValidationError,
    error_for,
)
from agentconsole.httpclient.transport import (
    DEFAULT_TIMEOUT_S,
    AsyncTransport,
    SyncTransport,
    Transport,
    auth_headers,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "JSON",
    "ApiError",
    "AsyncTransport",
    "AuthenticationError",
    "Call",
    "ConflictError",
    "IdempotencyMismatchError",
    "InProgressError",
    "NeedsReconcileError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "QuotaExceededError",
    "RateLimitError",
    "ServerError",
    "SyncTransport",
    "ToolFailedError",
    "Transport",
    "UnreachableError",
    "ValidationError",
    "auth_headers",
    "drop_none",
    "error_for",
    "segment",
]
