"""Errors raised by the store: open-time refusals and writes that can no longer be accepted."""

from __future__ import annotations

from pathlib import Path


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
    """A write or read was submitted after the store was closed or its writer died."""
