"""The published OpenAPI schema (``/schema/openapi.json``, Swagger UI) is the API's contract.

Litestar generates the paths; this module makes the result say what the server does:

* request bodies are the pydantic models' own JSON Schema (``schemas.py``): the same
  constraints the server validates, ``additionalProperties: false`` on strict bodies, the
  server's ``max_tokens`` limit; a route that reads a raw body (the tool gateway) publishes
  its schema in its handler's ``opt`` (:func:`contract`);
* each operation lists the statuses it answers, every error with the one error shape
  (``{"error": {"type", "message", "field"?, "param", "code"}}``,
  :data:`~.errors.ERROR_SCHEMA`), never Litestar's ``{status_code, detail}``;
* streaming answers are documented as ``text/event-stream``; keyed operations carry the
  bearer security scheme (public ones: ``contract(public=True)``).

Statuses of every operation: 503 (the request slots of all tenants together,
``server.limit_concurrency``, or a public route's pool), and unless public 401 and 429 (a
tenant's share of the request slots, ``server.per_tenant_concurrency``: every keyed route
counts against it, ``requestslots.py``); with a body 400 (malformed JSON), 413 and 422; with
parameters 422; on ``/v1/operator/*`` 403; plus the handler's own (:func:`contract`). OpenAI's
routes answer 400 where the others answer 422 (``errors.route_answer``). Query
and path parameters are published as declared (Litestar's ``oneOf [T, null]`` and lost zero
bounds repaired).
``tests/server/api/test_api_contract.py`` runs schemathesis against it.
:func:`fix_options_allow` repairs Litestar's ``OPTIONS`` answers (a route extended by a
second handler kept the first one's ``Allow``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from litestar import Litestar, Request
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.plugins import JsonRenderPlugin, SwaggerRenderPlugin
from litestar.params import ParameterKwarg
from litestar.routes import HTTPRoute

from agentconsole.server.api.errors import ERROR_SCHEMA, OPENAI_INVALID, openai_route
from agentconsole.server.api.schemas import BODY_MODELS

JSON = dict[str, Any]
REF = "#/components/schemas/{model}"
ERROR_REF = {"$ref": REF.format(model="Error")}
SECURITY = {"bearerAuth": {"type": "http", "scheme": "bearer", "description": "API key"}}
SSE = "text/event-stream"
_REASONS = {
    400: "Malformed JSON body (``invalid_json``: not JSON, or nested too deep)",
    401: "Missing or unknown API key",
    403: "Not allowed (an operator route with a tenant key, a wall-time quota)",
    404: "Unknown, or another tenant's",
    409: "Wrong state (ended program, running node, tool call in progress)",
    413: "Body over the size limit",
    422: "Validation: ``field`` names the culprit",
    424: "The tool ran and failed",
    429: (
        "Quota or rate limit (``Retry-After`` when it will pass), or the tenant's share of the"
        " server's request slots in use (``tenant_limit``, ``field``"
        " ``server.per_tenant_concurrency``, ``Retry-After: 1``)"
    ),
    503: (
        "Unavailable: runtime starting, an operator's drain, every request slot in use"
        " (``Retry-After``), a write the dead store cannot record"
    ),
}
#: the 400 of OpenAI's routes: every refusal of an invalid request, as OpenAI answers it
_OPENAI_400 = (
    f"Invalid request, as OpenAI answers it (``type`` ``{OPENAI_INVALID}``, ``code`` which:"
    " ``invalid_request`` with ``param`` the culprit, ``invalid_json``, a prompt over the"
    " model's context ``context_length_exceeded``, a request the engine refused)"
)
_BOUNDS = {
    "ge": "minimum",
    "le": "maximum",
    "gt": "exclusiveMinimum",
    "lt": "exclusiveMaximum",
    "min_length": "minLength",
    "max_length": "maxLength",
    "pattern": "pattern",
}
_RETRY_AFTER = {"Retry-After": {"schema": {"type": "string"}, "required": False}}


def contract(
    *errors: int,
    body: Mapping[str, Any] | None = None,
    media: tuple[str, ...] | None = None,
    public: bool = False,
    responses: Mapping[int, Mapping[str, Any]] | None = None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> JSON:
    """A handler's ``opt`` for the contract: its own error statuses, the JSON Schema of a
    body it reads raw, its success media types (e.g. JSON and SSE), no key needed, whole
    response objects that replace the generated ones, and the schemas of parameters it
    checks itself (by name)."""
    return {
        "contract": {
            "errors": errors,
            "body": body,
            "media": media,
            "public": public,
            "responses": dict(responses or {}),
            "params": dict(params or {}),
        }
    }


def _error_response(status: int, openai: bool) -> JSON:
    description = _OPENAI_400 if openai and status == 400 else _REASONS.get(status, "Error")
    response: JSON = {
        "description": description,
        "content": {"application/json": {"schema": ERROR_REF}},
    }
    if status in (429, 503):
        response["headers"] = _RETRY_AFTER
    return response


def _model_schemas(max_tokens: int) -> JSON:
    schemas: JSON = {"Error": copy.deepcopy(ERROR_SCHEMA)}
    for model in BODY_MODELS:
        schema = model.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    for name, field in (
        ("ChatCompletionRequest", "max_tokens"),
        ("ChatCompletionRequest", "max_completion_tokens"),
        ("CompletionRequest", "max_tokens"),
    ):
        for branch in schemas[name]["properties"][field].get("anyOf", []):
            if branch.get("type") == "integer":
                branch["maximum"] = max_tokens
    return schemas


def _operations(app: Litestar) -> Iterable[tuple[str, str, HTTPRouteHandler]]:
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            if not handler.resolve_include_in_schema():
                continue
            for method in handler.http_methods:
                if method not in ("HEAD", "OPTIONS"):
                    yield route.path_format or "/", method.lower(), handler


def _statuses(path: str, operation: JSON, spec: Mapping[str, Any]) -> set[int]:
    statuses = {503, *spec.get("errors", ())}
    if not spec.get("public"):
        # every keyed request takes one of its tenant's request slots (``requestslots.py``)
        statuses |= {401, 429}
    if operation.get("requestBody"):
        statuses |= {400, 413, 422}
    if operation.get("parameters"):
        statuses.add(422)
    if path.startswith("/v1/operator/"):
        statuses.add(403)
    if openai_route(path):  # an invalid request is 400 there (``errors.route_answer``)
        statuses = {400 if status == 422 else status for status in statuses}
    return statuses


def _fix_operation(path: str, operation: JSON, handler: HTTPRouteHandler) -> None:
    spec: Mapping[str, Any] = handler.opt.get("contract", {})
    if spec.get("body") is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": copy.deepcopy(spec["body"])}},
        }
    fields = _parameter_fields(handler)
    for parameter in operation.get("parameters", ()):
        name = parameter.get("name")
        if name in spec.get("params", {}):
            parameter["schema"] = copy.deepcopy(dict(spec["params"][name]))
        else:
            parameter["schema"] = _parameter_schema(parameter["schema"], fields.get(name))
    data = handler.parsed_fn_signature.parameters.get("data")
    if data is not None and "requestBody" in operation:
        operation["requestBody"]["required"] = not data.has_default
    responses: JSON = operation.setdefault("responses", {})
    success = {code: r for code, r in responses.items() if code.startswith("2")}
    responses.clear()
    responses.update(success)
    if spec.get("media"):
        for response in success.values():
            response["content"] = {kind: {"schema": _media_schema(kind)} for kind in spec["media"]}
    for status in sorted(_statuses(path, operation, spec)):
        responses[str(status)] = _error_response(status, openai_route(path))
    for status, response in spec.get("responses", {}).items():
        responses[str(status)] = copy.deepcopy(dict(response))
    if not spec.get("public"):
        operation["security"] = [{"bearerAuth": []}]


def _parameter_fields(handler: HTTPRouteHandler) -> dict[str, Any]:
    """The handler's parameters by their name on the wire."""
    fields: dict[str, Any] = {}
    for name, field in handler.parsed_fn_signature.parameters.items():
        kwarg = field.kwarg_definition
        if isinstance(kwarg, ParameterKwarg):
            name = kwarg.query or kwarg.header or kwarg.cookie or kwarg.name or name
        fields[name] = kwarg
    return fields


def _parameter_schema(schema: Mapping[str, Any], kwarg: object) -> JSON:
    """A parameter's schema as the server checks it. Litestar writes an optional parameter
    as ``oneOf: [T, null]`` with the constraints beside it (a parameter is never null on the
    wire) and drops a bound of 0 (``ge=0``); the constraints come from the declaration."""
    branches = [b for b in schema.get("oneOf", ()) if b.get("type") != "null"]
    out: JSON = dict(branches[0]) if len(branches) == 1 else {}
    for key, value in schema.items():
        if key != "oneOf":
            out.setdefault(key, value)
    if isinstance(out.get("type"), list):
        out["type"] = next(t for t in out["type"] if t != "null")
    if "enum" in out:
        out["enum"] = [v for v in out["enum"] if v is not None]
    if isinstance(kwarg, ParameterKwarg):
        for attr, key in _BOUNDS.items():
            value = getattr(kwarg, attr)
            if value is not None:
                out[key] = value
    return out


def _media_schema(kind: str) -> JSON:
    if kind != SSE:
        return {"type": "object"}
    text = {"type": "string"}
    return {"type": "object", "properties": {"event": text, "data": text, "id": text}}


def build_contract(app: Litestar, generated: Mapping[str, Any], max_tokens: int) -> JSON:
    """The published schema: Litestar's ``generated`` one made to say what the server does."""
    schema = copy.deepcopy(dict(generated))
    components = schema.setdefault("components", {})
    components.setdefault("schemas", {}).update(_model_schemas(max_tokens))
    components["securitySchemes"] = copy.deepcopy(SECURITY)
    paths: JSON = schema.get("paths", {})
    for path, method, handler in _operations(app):
        operation = paths.get(path, {}).get(method)
        if operation is not None:
            _fix_operation(path, operation, handler)
    return schema


class _Published:
    """The contract of one app, built on first request from Litestar's schema."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.schema: JSON | None = None

    def of(self, request: Request[Any, Any, Any], generated: dict[str, Any]) -> JSON:
        if self.schema is None:
            self.schema = build_contract(request.app, generated, self.max_tokens)
        return self.schema


class ContractJson(JsonRenderPlugin):
    """``/schema/openapi.json``: the contract."""

    def __init__(self, published: _Published) -> None:
        super().__init__()
        self.published = published

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        return super().render(request, self.published.of(request, openapi_schema))


class ContractSwagger(SwaggerRenderPlugin):
    """``/schema/swagger``: the contract in Swagger UI."""

    def __init__(self, published: _Published) -> None:
        super().__init__(path="/swagger")
        self.published = published

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        return super().render(request, self.published.of(request, openapi_schema))


def render_plugins(max_tokens: int) -> list[JsonRenderPlugin | SwaggerRenderPlugin]:
    """The schema's render plugins for ``OpenAPIConfig`` (``max_tokens``: the server's
    ``limits.max_tokens_limit``, the schema's maximum)."""
    published = _Published(max_tokens)
    return [ContractJson(published), ContractSwagger(published)]


def fix_options_allow(app: Litestar) -> None:
    """Point every route's ``OPTIONS`` handler at its route: Litestar builds it for the first
    handler of a path and keeps it when a later handler replaces the route, so ``Allow``
    missed the later methods."""
    for route in app.routes:
        if not isinstance(route, HTTPRoute) or "OPTIONS" not in route.route_handler_map:
            continue
        handler, _ = route.route_handler_map["OPTIONS"]
        for cell in handler.fn.__closure__ or ():
            if isinstance(cell.cell_contents, HTTPRoute) and cell.cell_contents is not route:
                cell.cell_contents = route
