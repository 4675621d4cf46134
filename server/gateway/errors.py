"""Errors the tool gateway answers with: each knows its HTTP status and wire ``type``.

The wire shape is the API's ``{"error": {"type", "message", "field"?, ...extra}}``, with the
core routes' types for the same failures (400 ``invalid_json``, 413 ``too_large``, 422
``invalid_request``). Every rejection is a 4xx; a 5xx from the gateway is a bug. A tool that
ran and failed is answered with 424 (Failed Dependency): the gateway itself worked, the
dependency did not.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentconsole.server.api.errors import SHOULD_RETRY, error_body
from agentconsole.server.store.jsonutil import JSONValue


class GatewayError(Exception):
    """A call or registration the gateway refuses (or a tool that failed)."""

    status: int = 400
    type: str = "bad_request"
    #: whether the same call sent again can pass, sent as ``x-should-retry`` (OpenAI's clients
    #: otherwise retry every 409 and 429 on their own); None: the header is left out
    retryable: bool | None = None

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        extra: Mapping[str, JSONValue] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.extra: dict[str, JSONValue] = dict(extra or {})
        self.headers: dict[str, str] = dict(headers or {})
        if self.retryable is not None:
            self.headers.setdefault(SHOULD_RETRY, "true" if self.retryable else "false")

    def audit_message(self) -> str:
        """What an audit row may keep of the message: all of it, unless the message quotes
        a value the caller sent (see :class:`InvalidArguments`)."""
        return self.message

    def body(self) -> dict[str, JSONValue]:
        """The JSON response body."""
        # the core API's shape (OpenAI's keys included), so every route has one error shape
        body = error_body(self.type, self.message, self.field)
        body["error"].update(self.extra)
        return body


class BodyTooLarge(GatewayError):
    status, type = 413, "too_large"


class InvalidJson(GatewayError):
    """The body is not JSON the server accepts (syntax, ``NaN``, a number out of range,
    nesting too deep): as on the core routes."""

    status, type = 400, "invalid_json"


class InvalidRequest(GatewayError):
    """The request body itself is malformed (not the tool's arguments)."""

    status, type = 422, "invalid_request"


class ToolNotFound(GatewayError):
    status, type = 404, "tool_not_found"


class ProgramNotFoundError(GatewayError):
    status, type = 404, "not_found"


class Forbidden(GatewayError):
    status, type = 403, "forbidden"


class Conflict(GatewayError):
    status, type = 409, "conflict"
    retryable = False


class ProgramNotRunning(GatewayError):
    status, type = 409, "program_not_running"
    retryable = False


class ShuttingDown(GatewayError):
    """The server is stopping: the call's tool was interrupted (or never ran); a retry on the
    next server is safe (read-only)."""

    status, type = 503, "unavailable"


class RateLimited(GatewayError):
    status, type = 429, "rate_limited"
    retryable = True


class QuotaExceededError(GatewayError):
    status, type = 429, "quota_exceeded"
    retryable = False


class TenantLimitReached(GatewayError):
    """A bound the gateway keeps on one tenant (its registered tools, their bytes) is
    reached: 429 ``tenant_limit`` naming the limit's ``field``, as the core's tenant limits
    answer. It does not pass by waiting (a tenant cannot delete a tool; replacing one of its
    tools still passes), so ``x-should-retry: false`` stops clients that retry every 429."""

    status, type = 429, "tenant_limit"
    retryable = False

    def __init__(self, message: str, *, field: str, limit: int) -> None:
        super().__init__(message, field=field, extra={"limit": limit})


class InvalidArguments(GatewayError):
    """The arguments fail the tool's JSON Schema; ``rule`` is the schema keyword that failed
    (``type``, ``maxLength``...).

    The message (jsonschema's) quotes the rejected value, which is the caller's own and helps
    it; the audit keeps only where (``field``) and which rule failed, as the value may be a
    secret the tenant's redaction keeps out of the store.
    """

    status, type = 422, "invalid_arguments"

    def __init__(self, message: str, *, field: str, rule: str) -> None:
        super().__init__(message, field=field)
        self.rule = rule

    def audit_message(self) -> str:
        """The failed rule, never the value."""
        return f"the arguments fail the schema's {self.rule!r} rule"


class UnsafeArguments(GatewayError):
    """The arguments pass the schema but fail a semantic check (path, URL, characters)."""

    status, type = 422, "unsafe_arguments"


class InvalidTool(GatewayError):
    """A tool registration is refused (schema not strict, bad executor, bad limits)."""

    status, type = 422, "invalid_tool"


class IdempotencyMismatch(GatewayError):
    status, type = 422, "idempotency_mismatch"


class NeedsReconcile(GatewayError):
    status, type = 409, "needs_reconcile"
    retryable = False


class InProgress(GatewayError):
    status, type = 409, "in_progress"
    retryable = False  # as every 409 (API.md, Retries): the agent reads it, not its client


class ToolFailed(GatewayError):
    """The tool ran (or may have run) and did not succeed; ``retryable`` says whether the
    same ``tool_call_id`` may be called again."""

    status, type = 424, "tool_failed"


class ToolTimeout(ToolFailed):
    type = "tool_timeout"


class EgressRefused(ToolFailed):
    """The egress policy refused the ``http`` tool's destination (its host resolves to a
    non-public address): nothing was sent. Audited like the refusals before execution."""

    type = "egress_refused"
