"""The API's error answers as exceptions: one class per meaning, chosen by status and type.

Every error carries ``status``, ``type``, ``message``, ``field`` and the decoded ``body``; the
API's error shape is ``{"error": {"type", "message", "field"?, ...}}``. ``status`` 0 means no
answer at all (:class:`UnreachableError`, raised by the consoles' client; the SDK lets
``httpx`` transport errors through).
"""

from __future__ import annotations

from typing import Any

import httpx


class ApiError(Exception):
    """An answer of 400 or more from the server, an answer that is not JSON, or no answer."""

    def __init__(
        self,
        status: int,
        type: str,
        message: str,
        field: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        head = f"{status} {type}: " if status else ""
        super().__init__(head + message + (f" (field {field})" if field else ""))
        self.status = status
        self.type = type
        self.message = message
        self.field = field
        self.body: dict[str, Any] = body if body is not None else {}

    @property
    def detail(self) -> dict[str, Any]:
        """The ``error`` object (extra keys such as ``tool_call_id`` included)."""
        error = self.body.get("error")
        return error if isinstance(error, dict) else {}


class UnreachableError(ApiError):
    """No answer: the server could not be reached or the connection broke (status 0)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "unreachable", message)


class ValidationError(ApiError):
    """400/422: the request (or a tool's arguments) is not acceptable."""


class IdempotencyMismatchError(ValidationError):
    """422: the ``tool_call_id`` (a tool call) or the ``Idempotency-Key`` (a program's
    create) was first used with other arguments."""


class AuthenticationError(ApiError):
    """401: missing or unknown API key."""


class PermissionDeniedError(ApiError):
    """403: the key may not do this (operator action, tool not allowed)."""


class NotFoundError(ApiError):
    """404: unknown, or owned by another tenant (the API does not tell them apart)."""


class ConflictError(ApiError):
    """409: the program or call is not in a state that allows this."""


class NeedsReconcileError(ConflictError):
    """409: a side-effecting call was interrupted by a crash and is never re-run
    automatically; an operator must reconcile it."""

    @property
    def tool_call_id(self) -> str | None:
        value = self.detail.get("tool_call_id")
        return value if isinstance(value, str) else None


class InProgressError(ConflictError):
    """409: a call with this key is still running; retry later."""


class PayloadTooLargeError(ApiError):
    """413: the body is over the server's limit."""


class ToolFailedError(ApiError):
    """424: the tool ran (or may have run) and failed. ``retryable``: calling again with the
    same attempt may run it again; otherwise use a new attempt number."""

    @property
    def retryable(self) -> bool:
        return self.detail.get("retryable") is True

    @property
    def tool_call_id(self) -> str | None:
        value = self.detail.get("tool_call_id")
        return value if isinstance(value, str) else None


class RateLimitError(ApiError):
    """429: a rate limit or concurrency cap; ``retry_after`` seconds when the server said."""

    @property
    def retry_after(self) -> float | None:
        value = self.body.get("_retry_after")
        return float(value) if isinstance(value, int | float | str) and value != "" else None


class QuotaExceededError(ApiError):
    """429 (tokens, tool calls, branches) or 403 (wall time): a program quota is used up."""


class ServerError(ApiError):
    """5xx: a server fault (a bug, or the store or runtime unavailable)."""


_BY_TYPE: dict[str, type[ApiError]] = {
    "idempotency_mismatch": IdempotencyMismatchError,
    "needs_reconcile": NeedsReconcileError,
    "in_progress": InProgressError,
    "quota_exceeded": QuotaExceededError,
}
_BY_STATUS: dict[int, type[ApiError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationError,
    424: ToolFailedError,
    429: RateLimitError,
}


def error_for(response: httpx.Response) -> ApiError:
    """The exception for an error ``response`` (status >= 400)."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    found = body.get("error")
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    kind = str(error.get("type") or body.get("type") or "error")
    message = str(
        error.get("message") or body.get("detail") or response.text[:200] or response.reason_phrase
    )
    field = error.get("field")
    if "retry-after" in response.headers:
        body["_retry_after"] = response.headers["retry-after"]
    status = response.status_code
    cls = (
        _BY_TYPE.get(kind) or _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    )
    return cls(status, kind, message, field if isinstance(field, str) else None, body)
