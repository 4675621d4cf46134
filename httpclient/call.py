"""A request as data: :class:`Call` holds the method, path, body, query and the decoder of the
JSON answer, so building a request and sending it are apart (one builder serves the blocking
and the asynchronous transport)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

T = TypeVar("T")
JSON = dict[str, Any]


def segment(value: str) -> str:
    """One path segment, percent-encoded (an id never changes the path's shape)."""
    return quote(value, safe="")


def drop_none(body: Mapping[str, Any]) -> JSON:
    """``body`` without its ``None`` values (the API reads an absent field as its default)."""
    return {k: v for k, v in body.items() if v is not None}


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and the decoder of its JSON answer (``{}`` for an empty body)."""

    method: str
    path: str
    parse: Callable[[Any], T]
    json: JSON | None = None
    params: Mapping[str, str | int] = field(default_factory=dict)
    #: request headers of this call only (the transport adds the key's)
    headers: Mapping[str, str] = field(default_factory=dict)
