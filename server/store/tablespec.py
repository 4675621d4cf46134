"""How a record type maps to its table: typed columns, upsert key, numbering, row codec.

Every record class is a frozen dataclass that names its :class:`TableSpec` and inherits
:class:`TableRecord`, so ``from_row()`` and the writer's Arrow columns (``bulk.py``, through
each column's ``Kind.encode``) derive from the one column list: one generic bulk path, no
per-table code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Self

import pyarrow as pa

from agentconsole.server.store.jsonutil import JSONValue, dumps, loads_object

#: The default of every JSON-object field.
NO_DATA: Mapping[str, JSONValue] = MappingProxyType({})


def opt_float(value: Any) -> float | None:
    """``None`` stays ``None``; anything else becomes a float."""
    return None if value is None else float(value)


def same(value: Any) -> Any:
    """The identity codec (the writer skips it)."""
    return value


@dataclass(frozen=True, slots=True)
class Kind:
    """A column type: its Arrow type and how a field value is written and read back."""

    arrow: Any
    encode: Callable[[Any], object] = same
    decode: Callable[[Any], Any] = same


STR = Kind(pa.string())
INT = Kind(pa.int32())
BOOL = Kind(pa.bool_())
FLOAT = Kind(pa.float64(), decode=opt_float)  # nullable: None stays None
STR_LIST = Kind(pa.list_(pa.string()), encode=list, decode=lambda v: tuple(v or ()))
JSON = Kind(pa.string(), encode=dumps, decode=loads_object)  # a JSON object in a text column


@dataclass(frozen=True, slots=True)
class TableSpec:
    """How records of one type are written: table, ``(column, kind)`` pairs (the column is
    the record's field of the same name), upsert key, writer-assigned sequence column."""

    table: str
    columns: tuple[tuple[str, Kind], ...]
    key: tuple[str, ...] = ()
    seq_column: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Column names in table order, the writer-assigned ``seq_column`` first if any."""
        head = (self.seq_column,) if self.seq_column else ()
        return head + tuple(name for name, _ in self.columns)

    def decode(self, row: tuple[Any, ...]) -> dict[str, Any]:
        """Field values of a ``SELECT`` of the columns (without ``seq_column``)."""
        return {name: kind.decode(v) for (name, kind), v in zip(self.columns, row, strict=True)}


class TableRecord:
    """Mixin of the record dataclasses: the row codec from the class's ``SPEC``."""

    __slots__ = ()
    SPEC: ClassVar[TableSpec]

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Self:
        """The record of a ``SELECT`` of ``SPEC.columns`` (without ``seq_column``)."""
        return cls(**cls.SPEC.decode(row))
