"""A tool schema's regular expressions, matched in linear time.

Tenants register tool schemas, and ``pattern`` and ``patternProperties`` in them are regular
expressions every call's arguments are matched against on the server. Python's ``re`` (what
``jsonschema`` uses) backtracks: ``^(a+)+$`` against 40 ``a`` and a ``!`` runs for minutes,
holding the GIL, so one tenant's tool call froze every other tenant's calls, ``/health`` and
shutdown. RE2 matches in time linear in the input, whatever the pattern; it has no
backreferences or lookaround, so a pattern that needs them is refused at registration (422)
rather than accepted and matched unsafely. RE2's ``\\d`` and ``\\w`` are ASCII, as ECMA-262's
(the dialect JSON Schema names) are, where Python's match any Unicode digit or letter.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError, validators

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the caller's 422, not a line on stderr


class UnsupportedPattern(ValueError):
    """The pattern does not compile as RE2 (backreferences, lookaround, or not a regex)."""


@lru_cache(maxsize=4096)
def compiled(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (cached: every call of a tool matches the same few).
    Raises :class:`UnsupportedPattern`."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as error:
        raise UnsupportedPattern(f"{pattern!r}: {error}") from None


def _pattern(
    validator: Any, pattern: str, instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    del schema
    if validator.is_type(instance, "string") and not compiled(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    del schema
    if not validator.is_type(instance, "object"):
        return
    assert isinstance(instance, Mapping)
    for pattern, subschema in patterns.items():
        matcher = compiled(pattern)
        for key, value in instance.items():
            if matcher.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


#: JSON Schema 2020-12 with ``pattern`` and ``patternProperties`` matched by RE2
ToolArgumentsValidator: Any = validators.extend(
    Draft202012Validator, {"pattern": _pattern, "patternProperties": _pattern_properties}
)
