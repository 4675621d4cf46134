"""Lenient readers for JSON values received from the HTTP API.

The SDK's results and the consoles' views must keep working when the server adds a field or
leaves an optional one out, so every reader takes a default instead of raising; a wrong *type*
falls back to the default too (a console that shows ``0`` beats one that crashes on a ``null``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JsonObject = Mapping[str, Any]


def obj(value: Any) -> JsonObject:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def objects(value: Any) -> list[JsonObject]:
    """The JSON objects in ``value`` if it is a list (other items are skipped)."""
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def text(data: JsonObject, key: str, default: str = "") -> str:
    """A string field; numbers are converted, anything else gives ``default``."""
    value = data.get(key)
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return default


def opt_text(data: JsonObject, key: str) -> str | None:
    """A string field that may be absent or null."""
    value = data.get(key)
    return value if isinstance(value, str) and value else None


def num(data: JsonObject, key: str, default: float = 0.0) -> float:
    """A numeric field as a float."""
    value = data.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return default


def opt_num(data: JsonObject, key: str) -> float | None:
    """A numeric field that may be absent or null."""
    value = data.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def integer(data: JsonObject, key: str, default: int = 0) -> int:
    """An integer field (floats are truncated)."""
    value = data.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    return default


def flag(data: JsonObject, key: str, default: bool = False) -> bool:
    """A boolean field."""
    value = data.get(key)
    return value if isinstance(value, bool) else default


def strings(value: Any) -> tuple[str, ...]:
    """The strings of a JSON list (other items are skipped)."""
    if not isinstance(value, list):
        return ()
    return tuple(item for item in value if isinstance(item, str))


def str_map(value: Any) -> dict[str, str]:
    """A ``{str: scalar}`` object as ``{str: str}``."""
    return {str(k): str(v) for k, v in obj(value).items() if v is not None}


def num_map(value: Any) -> dict[str, float]:
    """A ``{str: number}`` object; non-numbers are skipped."""
    return {
        str(k): float(v)
        for k, v in obj(value).items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
