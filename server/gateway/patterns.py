"""A tool schema's regular expressions, matched in linear time.

Tenants register tool schemas, and ``pattern`` and ``patternProperties`` in them are regular
expressions every call's arguments are matched against on the server. Python's ``re`` (what
``jsonschema`` uses) backtracks: ``^(a+)+$`` against 40 ``a`` and a ``!`` runs for minutes,
holding the GIL, so one tenant's tool call froze every other tenant's calls, ``/health`` and
shutdown. RE2 matches in time linear in the input, whatever the pattern; it has no
backreferences or lookaround, so a pattern that needs them is refused at registration (422)
rather than accepted and matched unsafely. RE2's ``\\d`` and ``\\w`` are ASCII, as ECMA-262's
(the dialect JSON Schema names) are, where Python's match any Unicode digit or letter.

Every keyword that matches a pattern goes through RE2: ``pattern``, ``patternProperties`` and
``additionalProperties`` (which tells the properties no pattern matches: ``jsonschema``'s own
joins the patterns into one Python regex, so a key an attacker chose met the backtracking
engine there, and the two engines could disagree on what is "additional", leaving a value
unchecked). ``unevaluatedProperties`` beside ``patternProperties`` is refused at registration
(``schema_rules``): its own search of evaluated keys is Python's.
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


def _matches(pattern: str, text: str) -> bool | None:
    """Whether RE2's ``pattern`` matches somewhere in ``text``; None for a pattern RE2 cannot
    compile (registration refuses those; one may still arrive by a path it did not walk, and
    it must fail the call as invalid, not as a server error)."""
    try:
        return bool(compiled(pattern).search(text))
    except UnsupportedPattern:
        return None


def _unsupported(pattern: str) -> ValidationError:
    return ValidationError(f"the schema's pattern {pattern!r} cannot be matched in linear time")


def _pattern(
    validator: Any, pattern: str, instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    del schema
    if not validator.is_type(instance, "string"):
        return
    assert isinstance(instance, str)
    matched = _matches(pattern, instance)
    if matched is None:
        yield _unsupported(pattern)
    elif not matched:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    del schema
    if not validator.is_type(instance, "object"):
        return
    assert isinstance(instance, Mapping)
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            matched = _matches(pattern, key)
            if matched is None:
                yield _unsupported(pattern)
                return
            if matched:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str] | None:
    """The properties of ``instance`` neither ``properties`` nor a ``patternProperties``
    pattern names (each pattern by RE2); None when a pattern cannot be matched."""
    named = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = []
    for key in instance:
        if key in named:
            continue
        found = [_matches(pattern, key) for pattern in patterns]
        if None in found:
            return None
        if not any(found):
            extras.append(key)
    return extras


def _additional_properties(
    validator: Any, allowed: object, instance: object, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    assert isinstance(instance, Mapping)
    extras = _additional(instance, schema)
    if extras is None:
        yield ValidationError("the schema's patternProperties cannot be matched in linear time")
        return
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif allowed is False and extras:
        listed = ", ".join(repr(extra) for extra in sorted(extras))
        yield ValidationError(f"Additional properties are not allowed ({listed} unexpected)")


#: JSON Schema 2020-12 with every pattern matched by RE2 (module docstring)
ToolArgumentsValidator: Any = validators.extend(
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)
