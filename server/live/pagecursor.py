"""The opaque ``cursor`` of ``GET /v1/programs``: a keyset position in the listing's order.

A listing is ordered newest first (``created_at`` descending, then ``program_id``); a cursor
names the sort key of the last row a page returned, and the next page starts strictly after
it. Unlike an offset it does not count rows, so programs that end (leaving a ``state``
filter) or start (arriving at the top) between two reads neither skip nor repeat a row.

The text is base64url (no padding) of the JSON ``[1, created_at, program_id]``: the leading
version lets a later format refuse an old cursor clearly instead of misreading it. Clients
must treat it as opaque and pass it back exactly as received. ``created_at`` is written with
Python's shortest round-trip float repr, so the position compares equal to the stored DOUBLE.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass

from agentconsole.server.live.errors import InvalidRequest

VERSION = 1
#: the longest program id the API accepts (``schemas.ID_PATTERN``: 128 characters)
MAX_ID = 128


@dataclass(frozen=True, slots=True)
class ProgramCursor:
    """The sort key of a listing's last row: continue strictly after it."""

    created_at: float
    program_id: str

    def encode(self) -> str:
        """The opaque text a response carries as ``next_cursor``."""
        return encode_position(self.created_at, self.program_id)

    @property
    def key(self) -> tuple[float, str]:
        """``(created_at, program_id)``, as the repository's ``after`` takes it."""
        return (self.created_at, self.program_id)

    @staticmethod
    def decode(text: str) -> ProgramCursor:
        """The cursor ``text`` names; :class:`InvalidRequest` (422, ``field`` ``cursor``)
        when it is not one this server wrote (truncated, edited, another format)."""
        fields = decode_position(text, 2)
        if fields is None:
            raise _invalid()
        created_at, program_id = fields
        if isinstance(created_at, bool) or not isinstance(created_at, int | float):
            raise _invalid()
        try:  # a JSON integer has no bound: too large for a float is no cursor of ours
            created_at = float(created_at)
        except OverflowError as error:
            raise _invalid() from error
        if not math.isfinite(created_at):
            raise _invalid()
        if not isinstance(program_id, str) or not 0 < len(program_id) <= MAX_ID:
            raise _invalid()
        return ProgramCursor(created_at, program_id)


def encode_position(*fields: object) -> str:
    """A listing's opaque cursor of ``fields`` (JSON values), versioned (module docstring)."""
    raw = json.dumps([VERSION, *fields], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_position(text: str, arity: int) -> list[object] | None:
    """The ``arity`` fields :func:`encode_position` wrote into ``text``, unchecked beyond the
    envelope; None when ``text`` is no cursor of this format (truncated, edited, another)."""
    try:
        padded = text + "=" * (-len(text) % 4)
        # validate=True: the lenient decoder would silently drop stray characters
        raw = base64.b64decode(padded, altchars=b"-_", validate=True)
        value = json.loads(raw.decode())
    except (binascii.Error, ValueError):  # UnicodeDecodeError, JSONDecodeError
        return None
    if not (isinstance(value, list) and len(value) == arity + 1):
        return None
    if type(value[0]) is not int or value[0] != VERSION:  # not ``true``, not ``1.0``
        return None
    return value[1:]


def _invalid() -> InvalidRequest:
    return InvalidRequest(
        "cursor: not a cursor this server returned; pass a response's next_cursor unchanged,"
        " or omit cursor to start from the newest program",
        field="cursor",
    )
