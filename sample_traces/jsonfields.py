"""Typed, path-aware reading of decoded JSON objects for :mod:`agentconsole.sample_traces.codec`.

Every failure is a :class:`TraceError` whose field names the key (nested readers prefix the
enclosing path), and :meth:`JsonObject.done` rejects keys nobody read, which is how the format
keeps ``additionalProperties: false`` without a schema validator at load time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TypeVar

from agentconsole.sample_traces.errors import TraceError

E = TypeVar("E", bound=StrEnum)
T = TypeVar("T")


class JsonObject:
    """Typed access to one JSON object's fields; :meth:`done` rejects fields nobody read."""

    def __init__(self, raw: object, path: str = "") -> None:
        if not isinstance(raw, dict):
            raise TraceError(f"expected an object, got {type(raw).__name__}", field=path)
        self.raw: dict[str, object] = raw
        self.seen: set[str] = set()

    def get(self, key: str, optional: bool) -> object:
        """The raw value of ``key`` (``None`` if absent and ``optional``); marks it as read."""
        self.seen.add(key)
        if key not in self.raw:
            if optional:
                return None
            raise TraceError("missing required field", field=key)
        return self.raw[key]

    def string(self, key: str) -> str:
        value = self.get(key, False)
        if not isinstance(value, str):
            raise TraceError(f"expected a string, got {_typename(value)}", field=key)
        return value

    def opt_string(self, key: str) -> str | None:
        return None if self.get(key, True) is None else self.string(key)

    def integer(self, key: str) -> int:
        value = self.get(key, False)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TraceError(f"expected an integer, got {_typename(value)}", field=key)
        return value

    def opt_integer(self, key: str) -> int | None:
        return None if self.get(key, True) is None else self.integer(key)

    def number(self, key: str) -> float:
        value = self.get(key, False)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TraceError(f"expected a number, got {_typename(value)}", field=key)
        return float(value)

    def opt_number(self, key: str) -> float | None:
        return None if self.get(key, True) is None else self.number(key)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key, True)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise TraceError(f"expected true or false, got {_typename(value)}", field=key)
        return value

    def enum(
        self,
        key: str,
        cls: type[E],
        default: E | None = None,
        *,
        allowed: Sequence[E] | None = None,
    ) -> E:
        """A member of ``cls`` given by its value; only one of ``allowed`` when given."""
        members = tuple(cls) if allowed is None else tuple(allowed)
        value = self.get(key, default is not None)
        if value is None and default is not None:
            return default
        if isinstance(value, str) and value in cls._value2member_map_ and cls(value) in members:
            return cls(value)
        choices = ", ".join(repr(m.value) for m in members)
        raise TraceError(f"{value!r} is not one of {choices}", field=key)

    def items(self, key: str, parse: Callable[[object, str], T], default: bool = False) -> list[T]:
        value = self.get(key, default)
        if value is None and default:
            return []
        if not isinstance(value, list):
            raise TraceError(f"expected an array, got {_typename(value)}", field=key)
        return [parse(item, f"{key}[{i}]") for i, item in enumerate(value)]

    def done(self) -> None:
        for key in self.raw:
            if key not in self.seen:
                raise TraceError("unknown field", field=key)


def _typename(value: object) -> str:
    return "null" if value is None else type(value).__name__


def nested(parse: Callable[[JsonObject], T]) -> Callable[[object, str], T]:
    """Run ``parse`` on an object found at ``path``, prefixing its errors with the path."""

    def run(raw: object, path: str) -> T:
        try:
            obj = JsonObject(raw)
            result = parse(obj)
            obj.done()
        except TraceError as err:
            raise err.within(path) from None
        return result

    return run


def string_item(raw: object, path: str) -> str:
    if not isinstance(raw, str):
        raise TraceError(f"expected a string, got {_typename(raw)}", field=path)
    return raw
