"""JSON encoding for stored columns: compact, never failing on the event hot path."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TypeAlias

JSONValue: TypeAlias = str | int | float | bool | list["JSONValue"] | dict[str, "JSONValue"] | None


def _builtin(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _lenient(value: object) -> object:
    try:
        return _builtin(value)
    except TypeError:
        return repr(value)


_strict = json.JSONEncoder(
    default=_builtin, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


def _finite(value: object) -> object:
    """A copy of ``value`` with NaN and infinities replaced by ``null`` (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(value: object) -> str:
    """Encode ``value`` as compact JSON text.

    Mappings of any kind (``MappingProxyType`` included) become objects. Non-finite floats
    become ``null`` and unknown objects their ``repr``, so one odd value never fails a batch.
    """
    try:
        return _strict(value)
    except (ValueError, TypeError):
        return json.dumps(_finite(value), default=_lenient, separators=(",", ":"))


def loads_object(text: str | None) -> dict[str, JSONValue]:
    """Decode a stored JSON object; ``None`` or a non-object decodes to an empty dict."""
    if text is None:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}
