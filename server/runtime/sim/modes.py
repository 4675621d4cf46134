"""A simulator mode looked up by name (``--prefix-cache``, ``--cross-model-kv``): one lookup,
one error naming the choices, for every small table of named modes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")


def mode_named(modes: Mapping[str, T], name: str, what: str) -> T:
    """The mode of ``modes`` called ``name``; ``ValueError`` naming ``what`` and the choices
    (in the table's order) for an unknown one."""
    try:
        return modes[name]
    except KeyError:
        choices = ", ".join(modes)
        raise ValueError(f"unknown {what} {name!r}; choose from {choices}") from None
