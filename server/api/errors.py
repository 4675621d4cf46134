"""Every error answers ``{"error": {"type", "message", "field"?, "param", "code"}}`` with a
4xx status. ``param`` and ``code`` are OpenAI's names (the client's ``e.param``, ``e.code``):
``param`` is ``field`` (or null), ``code`` the ``type`` unless the error names a narrower one;
``type`` and ``field`` stay for the clients and consoles that read them. A refusal that says
whether a retry can pass (``ServiceError.retryable``) carries ``x-should-retry: true|false``,
the header OpenAI's clients obey over their own rule (retry every 408, 409, 429 and 5xx).

OpenAI's own routes (:func:`openai_route`: chat and text completions, the model list) answer
a request refused as invalid as OpenAI's API does (:func:`route_answer`, the one place that
decides): 400, never 422 (the client's ``BadRequestError``, which agent frameworks catch, e.g.
``code`` ``context_length_exceeded`` to trim their history), ``type`` OpenAI's
``invalid_request_error``, our type kept in ``code``. agentconsole's own routes keep 422.

One handler, registered for ``Exception`` on the app, maps the service's refusals, Litestar's
own client errors (validation 422, malformed JSON 400, oversized body 413, unknown route 404,
wrong method 405), the store's errors (503 ``unavailable``, retryable: its writer died) and
anything else (500: a bug, logged with its traceback). The tool
gateway's errors and the HTTP server's own refusals (``connections.py``: malformed HTTP 400,
slow headers 408, oversized headers 431, connection limit 503) use the same shape and types;
:data:`ERROR_SCHEMA` is that shape as JSON Schema (the OpenAPI contract's ``Error``).

A body that fails validation (422, or 400 on OpenAI's routes) names one culprit, as the
client wrote it (:mod:`bodyerrors`).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from litestar import Request, Response
from litestar.exceptions import HTTPException, InternalServerException, ValidationException

from agentconsole.server.api.bodyerrors import body_errors, body_schema, culprit
from agentconsole.server.live.errors import ServiceError, Unavailable
from agentconsole.server.store.errors import StoreDamagedError, StoreError

log = logging.getLogger(__name__)
#: Litestar's detail when the client disconnected before its body was read
_GONE = "client disconnected prematurely"

_TYPES = {
    400: "invalid_json",
    408: "request_timeout",
    409: "conflict",
    431: "headers_too_large",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "rate_limited",
    503: "unavailable",
}


class ApiError(ServiceError):
    """A refusal made by the HTTP layer itself (auth, headers, query parameters)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, field=field, headers=headers)
        self.status = status
        self.type = type or error_type(status)


#: the error shape as JSON Schema (gateway errors add keys such as ``tool_call_id``)
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {
                "type": {"type": "string"},
                "message": {"type": "string"},
                "field": {"type": "string"},
                # OpenAI's names, on every route (the tool gateway's too)
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


#: the paths of OpenAI's API that the server serves (``/v1/models/{id}`` by its prefix, but
#: for agentconsole's own route under it)
OPENAI_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/models"})
_OPENAI_MODEL = "/v1/models/"
_NATIVE_UNDER_MODELS = "/v1/models/compatibility"
#: OpenAI's ``type`` of a refused request (its 400s: a bad parameter, a prompt too long)
OPENAI_INVALID = "invalid_request_error"
#: the statuses of a request refused as invalid: malformed (400) or not acceptable (422)
_INVALID = frozenset({400, 422})


def openai_route(path: str) -> bool:
    """Whether ``path`` (a request's, or a route's path format) is one of OpenAI's."""
    path = path.rstrip("/")
    if path in OPENAI_PATHS:
        return True
    return path.startswith(_OPENAI_MODEL) and path != _NATIVE_UNDER_MODELS


def as_openai(status: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """An error answer as OpenAI's API gives it: a request refused as invalid (400, 422) is
    400 with ``type`` ``invalid_request_error`` and our type in ``code`` (``field``, ``param``
    as they are); any other as it is (its ``type`` is ours: OpenAI's clients pick the
    exception by status alone)."""
    if status not in _INVALID:
        return status, body
    return 400, {"error": {**body["error"], "type": OPENAI_INVALID}}


def route_answer(path: str, status: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The status and body an error of ``status`` answers on ``path``: on OpenAI's routes as
    OpenAI answers it (:func:`as_openai`), on agentconsole's as built."""
    return as_openai(status, body) if openai_route(path) else (status, body)


def error_type(status: int) -> str:
    """The ``type`` of a generic error of ``status``."""
    return _TYPES.get(status, "error")


#: the header OpenAI's clients read before their own retry rule (``openai._base_client``)
SHOULD_RETRY = "x-should-retry"


def error_body(kind: str, message: str, field: str | None = None) -> dict[str, Any]:
    """The JSON error shape of API.md (OpenAI's ``param`` is the field, its ``code`` the
    type)."""
    error: dict[str, Any] = {"type": kind, "message": message}
    if field:
        error["field"] = field
    error["param"] = field or None
    error["code"] = kind
    return {"error": error}


def refusal_body(error: Exception) -> dict[str, Any]:
    """The body of a refusal the service raised (the handler's answer, a stream's last
    frame)."""
    if isinstance(error, ServiceError):
        return error_body(error.type, str(error), error.field)
    return error_body(str(getattr(error, "type", "error")), str(error))


def openai_refusal_body(error: Exception) -> dict[str, Any]:
    """The body of a refusal on OpenAI's routes (a stream's error frame, sent after its 200):
    :func:`refusal_body` as :func:`as_openai` shapes it."""
    status = error.status if isinstance(error, ServiceError) else 500
    return as_openai(status, refusal_body(error))[1]


def refusal_headers(error: ServiceError) -> dict[str, str]:
    """``error``'s headers, with ``x-should-retry`` when it says whether a retry can pass."""
    if error.retryable is None:
        return error.headers
    return {**error.headers, SHOULD_RETRY: "true" if error.retryable else "false"}


def _validation(
    request: Request[Any, Any, Any], exc: ValidationException
) -> tuple[str, str | None]:
    details = exc.extra if isinstance(exc.extra, list) else []
    errors = body_errors(exc, details)
    if errors:
        field, message = culprit(errors, body_schema(request))
        return (f"{field}: {message}" if field else message), field or None
    for item in details:
        if isinstance(item, dict):
            key = item.get("key")
            message = str(item.get("message", exc.detail))
            if key == "data" and item.get("source") == "body" and message == "'data'":
                return "a JSON body is required", None  # Litestar's KeyError for no body
            if key and item.get("source") in ("query", "header", "cookie", "path"):
                key = _public_name(request, str(key))
            return (f"{key}: {message}" if key else message), (str(key) if key else None)
    return str(exc.detail), None


def _public_name(request: Request[Any, Any, Any], parameter: str) -> str:
    """The name the client sent for the handler's ``parameter`` (``state`` for a handler's
    ``state_filter``: ``state`` is a name Litestar reserves for its own injection)."""
    try:
        fields = request.route_handler.parsed_fn_signature.parameters
    except Exception:  # no route handler (refused before routing)
        return parameter
    kwarg = getattr(fields.get(parameter), "kwarg_definition", None)
    return getattr(kwarg, "name", None) or parameter


#: the operator routes (core and tool gateway): a refused call there is audited
OPERATOR_PATH = "/v1/operator/"


class RefusalLog(Protocol):
    """Where refused operator calls are audited (``OperatorDesk.refused``)."""

    def refused(
        self, actor: str, action: str, target: str, reason: str, *, operator: bool = False
    ) -> None: ...


def audit_refusal(
    request: Request[Any, Any, Any],
    desk: RefusalLog,
    actor: str,
    error: ServiceError,
    *,
    operator: bool = False,
) -> None:
    """Audit an operator route refused before it acted (action: the handler's
    ``opt["audit_action"]`` or name; target: the program or tool call in the path;
    ``operator``: the caller holds an operator key)."""
    handler = request.route_handler
    params = request.path_params
    target = str(params.get("program_id") or params.get("tool_call_id") or "")
    action = str(handler.opt.get("audit_action", handler.handler_name))
    desk.refused(actor, action, target, f"{error.status} {error}", operator=operator)


def _audit_invalid_operator_call(request: Request[Any, Any, Any], error: ApiError) -> None:
    """A body or parameter Litestar refused on an operator route (malformed, invalid, too
    large) is audited as the refusals the handlers make are: the operator's key id as actor
    when the key is good."""
    live = getattr(request.app.state, "live", None)  # the app's wiring (``deps.Live``)
    routed = request.scope.get("route_handler") is not None  # not a path with no route
    if live is None or not routed or not request.scope["path"].startswith(OPERATOR_PATH):
        return
    authorization = request.headers.get("authorization")
    try:
        principal = live.keys.resolve(authorization)
    except ServiceError:
        audit_refusal(request, live.desk, live.keys.actor_of(authorization), error)
        return
    audit_refusal(request, live.desk, principal.key_id, error, operator=principal.operator)


def handle_error(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """The app's one exception handler (see the module docstring): the refusal of ``exc``,
    as the route's family answers it (:func:`route_answer`)."""
    status, body, headers = _refusal(request, exc)
    status, body = route_answer(request.scope["path"], status, body)
    return Response(body, status_code=status, headers=headers)


def _refusal(
    request: Request[Any, Any, Any], exc: Exception
) -> tuple[int, dict[str, Any], dict[str, str] | None]:
    """The status, body and headers of ``exc``'s refusal, in agentconsole's own shape."""
    if isinstance(exc, ServiceError):
        return exc.status, refusal_body(exc), refusal_headers(exc)
    if isinstance(exc, ValidationException):
        if "JSON" in str(exc.detail) or "decode" in str(exc.detail).lower():
            _audit_invalid_operator_call(request, ApiError(400, str(exc.detail)))
            return 400, error_body("invalid_json", str(exc.detail)), None
        message, field = _validation(request, exc)
        _audit_invalid_operator_call(request, ApiError(422, message))
        return 422, error_body("invalid_request", message, field), None
    if isinstance(exc, HTTPException) and exc.status_code < 500:
        status = exc.status_code
        _audit_invalid_operator_call(request, ApiError(status, str(exc.detail)))
        return status, error_body(_TYPES.get(status, "error"), str(exc.detail)), exc.headers or None
    if isinstance(exc, StoreDamagedError):
        # a damaged block of the files: a retry meets the same block, so it is said not to
        # pass (the operator restores); one line, the message names the file
        log.error("store damaged under %s %s: %s", request.method, request.url.path, exc)
        refusal = Unavailable(str(exc), retryable=False)
        return refusal.status, refusal_body(refusal), refusal_headers(refusal)
    if isinstance(exc, StoreError):
        # the store closed (shutting down) under a read that needs a flush, or its writer
        # died under a write the write gate let pass (racing the death). Not a bug of ours:
        # the dead store's refusal (``deps.refuse_unrecordable_write``), 503 and retryable
        log.error("store unavailable during %s %s: %r", request.method, request.url.path, exc)
        refusal = Unavailable("the store is not available (see /ready); retry later")
        return refusal.status, refusal_body(refusal), refusal_headers(refusal)
    if isinstance(exc, InternalServerException) and exc.detail == _GONE:
        # the client left mid-body (or its body timed out): nobody reads this answer
        log.debug("client left during %s %s", request.method, request.url.path)
        return 400, error_body("client_disconnected", _GONE), None
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    return status, error_body("internal_error", "internal server error"), None
