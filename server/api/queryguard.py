"""Query parameters as strict as the published schema says (a Litestar guard).

Litestar converts query strings leniently: ``?since=null`` becomes ``None`` for an optional
number or choice (as if absent), and a parameter given twice where one value is expected is
read as one of them. Both answer 422 here (``field``: the parameter). Unknown parameters are
ignored, as the schema allows. Every handler with query parameters names the guard
(``guards=[strict_query]``); the others do without its cost (Litestar copies the handler for
each guard call).
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.params import ParameterKwarg, QueryParameter
from litestar.typing import FieldDefinition

from agentconsole.server.api.errors import ApiError

#: a paged listing's ``cursor`` (``GET /v1/programs``, ``GET /v1/tools``): the opaque text of
#: the previous answer's ``next_cursor`` (base64url, ``live/pagecursor.py``)
PageCursor = Annotated[
    str | None,
    QueryParameter(
        min_length=1,
        max_length=512,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="next_cursor of the previous page: continue strictly after it",
    ),
]

#: by handler function: a guard receives a fresh copy of its handler on every call
_FIELDS: dict[Any, dict[str, FieldDefinition]] = {}


def _fields(handler: BaseRouteHandler) -> dict[str, FieldDefinition]:
    """The handler's parameters by their name in the query string (cached per handler)."""
    fields = _FIELDS.get(handler.fn)
    if fields is None:
        fields = {}
        for name, field in handler.parsed_fn_signature.parameters.items():
            kwarg = field.kwarg_definition
            if isinstance(kwarg, ParameterKwarg):
                name = kwarg.query or kwarg.name or name
            fields[name] = field
        _FIELDS[handler.fn] = fields
    return fields


def _nullable_non_text(field: FieldDefinition) -> bool:
    return field.is_optional and not any(t.annotation is str for t in field.inner_types)


def strict_query(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    """The guard (see the module docstring)."""
    if not connection.scope.get("query_string"):
        return
    fields = _fields(handler)
    params = connection.query_params
    for name in params:
        field = fields.get(name)
        if field is None or field.is_non_string_sequence:
            continue
        values = params.getall(name)
        if len(values) > 1:
            raise ApiError(422, f"{name} may be given once", field=name)
        if values[0] == "null" and _nullable_non_text(field):
            raise ApiError(422, f"{name}: not a valid value (omit it instead)", field=name)
