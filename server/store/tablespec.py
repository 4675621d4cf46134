"""How a record type maps to its table: columns with Arrow types, upsert key, numbering.

Every record class names its :class:`TableSpec`, so the writer has one generic bulk path
and no per-table code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from agentconsole.server.store.jsonutil import JSONValue

#: The default of every JSON-object field.
NO_DATA: Mapping[str, JSONValue] = MappingProxyType({})
STR = pa.string()
FLOAT = pa.float64()
INT = pa.int32()
BOOL = pa.bool_()
STR_LIST = pa.list_(pa.string())


@dataclass(frozen=True, slots=True)
class TableSpec:
    """How records of one type are written: table, ``(column, arrow type)`` pairs, key."""

    table: str
    columns: tuple[tuple[str, Any], ...]
    key: tuple[str, ...] = ()
    seq_column: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Column names in table order, the writer-assigned ``seq_column`` first if any."""
        head = (self.seq_column,) if self.seq_column else ()
        return head + tuple(name for name, _ in self.columns)


def opt_float(value: Any) -> float | None:
    """``None`` stays ``None``; anything else becomes a float."""
    return None if value is None else float(value)
