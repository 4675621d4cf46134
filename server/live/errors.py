"""What the live service refuses, as exceptions the HTTP layer maps to status codes.

The service never imports the web framework: each error carries the HTTP status it means, an
error ``type`` for the JSON body (and a ``code``, the type unless a class names a narrower
one), an optional ``field``, extra headers (``Retry-After``) and whether a client should retry
it (``retryable``, sent as ``x-should-retry``: OpenAI's clients retry every 409 and 429 on
their own, which a refusal that can never pass must stop).
"""

from __future__ import annotations

from agentconsole.scheduler.runtime import CONTEXT_LENGTH_EXCEEDED

#: how OpenAI's own refusal of a prompt too long opens, which frameworks match to tell an
#: overflow (LiteLLM)
_CONTEXT_IS = "This model's maximum context length is "


class ServiceError(Exception):
    """A refusal with an HTTP meaning; ``str(error)`` is the message for the client."""

    status = 400
    type = "invalid_request"
    #: True: a retry may pass (the client waits and retries); False: it never will, however
    #: often it is sent (the client must not retry); None: the status says (the default)
    retryable: bool | None = None

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.field = field
        self.headers = headers or {}
        if retryable is not None:  # the raiser knows better than the class
            self.retryable = retryable


class InvalidRequest(ServiceError):
    """The request is well-formed but not acceptable (unknown parent, wrong node kind)."""

    status = 422


class ContextTooLong(InvalidRequest):
    """The prompt and ``max_tokens`` do not fit in the served model's context: 400, as OpenAI
    answers it, not the 422 of other invalid requests, since agent frameworks catch the
    client's ``BadRequestError`` with this code to trim their history and try again."""

    status = 400
    type = CONTEXT_LENGTH_EXCEEDED

    @classmethod
    def of_context(cls, limit: int | None, detail: str, *, field: str) -> ContextTooLong:
        """The refusal naming ``field``, its message ``detail`` opened as OpenAI's own is
        ("This model's maximum context length is N tokens; "), where the model's context of
        ``limit`` tokens is known (None: ``detail`` alone)."""
        opening = f"{_CONTEXT_IS}{limit} tokens; " if limit is not None else ""
        return cls(f"{opening}{detail}", field=field)


class NotFound(ServiceError):
    """Unknown, or owned by another tenant (the two are indistinguishable on purpose)."""

    status = 404
    type = "not_found"


class Conflict(ServiceError):
    """The program or node is not in a state that allows this (finished, already running).
    The same request sent again finds the same state: not retryable (409 is a lock timeout to
    OpenAI's clients, which they retry)."""

    status = 409
    type = "conflict"
    retryable = False


class ProgramClosed(Conflict):
    """The program no longer runs (finished, failed or cancelled): a 409 like any
    :class:`Conflict` (callers catching that still do), told apart from a node in the wrong
    state ("already running") by its class, so the tool gateway answers it
    ``program_not_running`` without asking the program's state again. Its wire type is the
    gateway's too: a call on an ended program reads the same on every route."""

    type = "program_not_running"

    def __init__(self, program_id: str, state: str, *, field: str | None = None) -> None:
        super().__init__(f"program {program_id!r} is {state}", field=field)
        self.program_id = program_id
        self.state = state


class NodeWithdrawn(Conflict):
    """The node was cancelled on request (``POST .../nodes/{node_id}/cancel``, its own or an
    ancestor's): it never runs again and no new node may hang from it."""

    def __init__(self, program_id: str, node_id: str, *, field: str = "node_id") -> None:
        super().__init__(
            f"node {node_id!r} of program {program_id!r} was cancelled: it does not run again"
            " and takes no new child",
            field=field,
        )


class QuotaError(ServiceError):
    """A program quota is exhausted: 429 for tokens, tool calls and branches; 403 for wall
    time (it will never pass)."""

    status = 429
    type = "quota_exceeded"
    retryable = False  # a program's quota never grows back

    def __init__(
        self, program_id: str, quota: str, limit: float, used: float, *, why: str = ""
    ) -> None:
        message = f"program {program_id!r} exceeded its {quota} quota ({used:g} of {limit:g})"
        super().__init__(f"{message}{': ' if why else ''}{why}", field=f"quotas.{quota}")
        self.quota = quota
        if quota == "wall_time_s":
            self.status = 403


class Unavailable(ServiceError):
    """The runtime is not ready (still starting, or stopped)."""

    status = 503
    type = "unavailable"
    retryable = True


class ShuttingDown(Unavailable):
    """The server is closing (a clean stop): a fresh one per refusal, since a raised
    exception carries its own traceback."""

    def __init__(self) -> None:
        super().__init__("the server is shutting down", headers={"Retry-After": "5"})


class Draining(Unavailable):
    """An operator drains the server (``POST /v1/operator/drain``): a new call is refused
    until the drain ends, when a retry passes (the calls admitted before it run then). A fresh
    one per refusal, as :class:`ShuttingDown`."""

    type = "draining"

    def __init__(self) -> None:
        super().__init__(
            "the server is draining: an operator stopped admitting new calls; retry later",
            headers={"Retry-After": "5"},
        )


class ClientLeft(ServiceError):
    """The client disconnected while its call waited (at the program door): nobody reads the
    answer (the status is nginx's "client closed request", for the access log)."""

    status = 499
    type = "client_closed_request"
