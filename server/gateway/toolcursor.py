"""The opaque ``cursor`` of ``GET /v1/tools``: a keyset position in the listing's order.

A listing is ordered by tool name (for an operator key, by name then owner, ``""`` for a
platform tool); a cursor names the last tool a page returned, and the next page starts
strictly after it. Like ``GET /v1/programs``'s cursor (``live/pagecursor.py``) it counts no
rows, so tools registered between two reads neither shift nor repeat the rest.

The text is the programs cursor's envelope (``pagecursor.encode_position``) of ``name, owner``.
Clients must treat it as opaque and pass it back exactly as received.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentconsole.server.gateway.errors import InvalidRequest
from agentconsole.server.gateway.registration import is_tool_name
from agentconsole.server.live.pagecursor import decode_position, encode_position


@dataclass(frozen=True, slots=True)
class ToolCursor:
    """The last tool of a page: continue strictly after it."""

    name: str
    owner: str

    def encode(self) -> str:
        """The opaque text a response carries as ``next_cursor``."""
        return encode_position(self.name, self.owner)

    @staticmethod
    def decode(text: str) -> ToolCursor:
        """The cursor ``text`` names; :class:`InvalidRequest` (422, ``field`` ``cursor``)
        when it is not one this server wrote (truncated, edited, another listing's)."""
        fields = decode_position(text, 2)
        if fields is None:
            raise _invalid()
        name, owner = fields
        if not is_tool_name(name) or not isinstance(owner, str):
            raise _invalid()
        return ToolCursor(name, owner)


def _invalid() -> InvalidRequest:
    return InvalidRequest(
        "cursor: not a cursor this server returned; pass a response's next_cursor unchanged,"
        " or omit cursor to start from the first tool",
        field="cursor",
    )
