"""Errors raised by the store: open-time refusals and writes that can no longer be accepted."""

from __future__ import annotations

import re
from pathlib import Path

#: DuckDB's words for a block whose checksum does not match its contents (a plain
#: ``duckdb.Error``: "Corrupt database file: computed checksum 55... does not match stored
#: checksum 19... in block at location 14692352").
_CORRUPT_BLOCK = re.compile(r"Corrupt database file|checksum \d+ does not match stored checksum")
#: What to do about a damaged file (the open refusals and the damage met later say the same).
DAMAGE_REMEDY = (
    "Keep the files as they are (a copy is the safe way to experiment); restore from a backup "
    "or the last Parquet export"
)


def is_corrupt_block(error: BaseException) -> bool:
    """Whether DuckDB's ``error`` says a block of the file failed its checksum."""
    return _CORRUPT_BLOCK.search(str(error)) is not None


class StoreError(Exception):
    """Base class of every error the store raises on purpose."""


class StoreOpenError(StoreError):
    """The database could not be opened safely; start-up must stop.

    The files named in the message were not modified, copied or deleted. ``reason`` says what
    was found, ``remedy`` what the operator can do about it.
    """

    def __init__(self, path: Path, reason: str, remedy: str) -> None:
        self.path = path
        self.reason = reason
        self.remedy = remedy
        super().__init__(f"cannot open store {path}: {reason}. {remedy}")


class StoreClosedError(StoreError):
    """A write or read was submitted after the store was closed or its writer died, or while
    its writer holds a batch its files refused (disk full, read-only)."""


class StoreDamagedError(StoreError):
    """A read met a damaged block of the store's files (a checksum mismatch). What lies in
    that block cannot be served; the rest of the store still can, so the server keeps running
    and only the requests that need it fail. ``detail`` is DuckDB's message (the block's
    byte offset; it does not say which of the two files)."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"store {path} (or its event log) is damaged: {detail}. {DAMAGE_REMEDY}.")
