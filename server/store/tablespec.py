"""How a record type maps to its table: typed columns, upsert key, numbering, row codec.

Every record class is a frozen dataclass that names its :class:`TableSpec` and inherits
:class:`TableRecord`, so ``from_row()`` and the writer's Arrow columns (``bulk.py``, through
each column's ``Kind.encode``) derive from the one column list: one generic bulk path, no
per-table code.

The tables themselves are made by the migrations (``schema.py``), whose DDL is frozen history:
a migration must mean the same thing forever, so it is never generated from these specs, which
change. Each :class:`Kind` names its DuckDB type, and ``tests/server/store/test_store_columns.py``
checks every table of a migrated store against its spec, column by column (name, type, order).
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
    """A column type: its DuckDB type (as ``duckdb_columns()`` names it), its Arrow type and
    how a field value is written and read back."""

    sql: str
    arrow: Any
    encode: Callable[[Any], object] = same
    decode: Callable[[Any], Any] = same


STR = Kind("VARCHAR", pa.string())
INT = Kind("INTEGER", pa.int32())
BOOL = Kind("BOOLEAN", pa.bool_())
FLOAT = Kind("DOUBLE", pa.float64(), decode=opt_float)  # nullable: None stays None
STR_LIST = Kind("VARCHAR[]", pa.list_(pa.string()), encode=list, decode=lambda v: tuple(v or ()))
JSON = Kind("JSON", pa.string(), encode=dumps, decode=loads_object)  # a JSON object as text
JSON_TEXT = Kind("JSON", pa.string())  # JSON the record keeps as its text (written as is)
#: The writer-assigned sequence column (``TableSpec.seq_column``, ``events.seq``).
SEQ = Kind("BIGINT", pa.int64())


@dataclass(frozen=True, slots=True)
class TableSpec:
    """How records of one type are written: table, ``(column, kind)`` pairs (the column is
    the record's field of the same name), upsert key, writer-assigned sequence column."""

    table: str
    columns: tuple[tuple[str, Kind], ...]
    key: tuple[str, ...] = ()
    seq_column: str | None = None

    @property
    def table_columns(self) -> tuple[tuple[str, Kind], ...]:
        """``(column, kind)`` in table order, the writer-assigned ``seq_column`` first if any."""
        head = ((self.seq_column, SEQ),) if self.seq_column else ()
        return head + self.columns

    @property
    def names(self) -> tuple[str, ...]:
        """Column names in table order, the writer-assigned ``seq_column`` first if any."""
        return tuple(name for name, _ in self.table_columns)

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
