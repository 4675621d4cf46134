"""What a ``program.created`` event carries so the program can be made again from it alone.

A restart rebuilds a program created after the store's last projected rows from its events
(``server/live/eventtail.py``), so the creation event holds the program's labels and quotas,
flattened to the event's scalar values: ``label.<key>`` and ``quota.<field>`` (set ones only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from agentconsole.scheduler.events import Scalar
from agentconsole.scheduler.program import Program, Quotas

_LABEL = "label."
_QUOTA = "quota."
_QUOTA_FIELDS = tuple(f.name for f in fields(Quotas))


def creation_data(program: Program) -> dict[str, Scalar]:
    """The labels and set quotas of ``program`` as ``program.created`` data keys."""
    data: dict[str, Scalar] = {f"{_LABEL}{k}": v for k, v in program.labels.items()}
    for name in _QUOTA_FIELDS:
        value = getattr(program.quotas, name)
        if value is not None:
            data[f"{_QUOTA}{name}"] = value
    return data


def labels_of(data: Mapping[str, Scalar]) -> dict[str, str]:
    """The labels :func:`creation_data` wrote."""
    return {k[len(_LABEL) :]: str(v) for k, v in data.items() if k.startswith(_LABEL)}


def quotas_of(data: Mapping[str, Scalar]) -> Quotas:
    """The quotas :func:`creation_data` wrote (unset ones unlimited)."""

    def number(name: str) -> float | None:
        value = data.get(f"{_QUOTA}{name}")
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if ok and value is not None else None

    def count(name: str) -> int | None:
        value = number(name)
        return None if value is None else int(value)

    return Quotas(
        wall_time_s=number("wall_time_s"),
        tokens=count("tokens"),
        tool_calls=count("tool_calls"),
        branches=count("branches"),
        concurrent_tools=count("concurrent_tools"),
    )
