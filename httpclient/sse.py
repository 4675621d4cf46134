"""An incremental Server-Sent Events parser (the WHATWG event-stream format).

Pure and synchronous: feed it decoded text as it arrives, in chunks of any size, and it returns
the complete messages. Used by the consoles' feed reader (``GET /v1/events``); kept separate so
it can be tested exhaustively.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEMessage:
    """One dispatched event: its ``event`` name (default ``message``), data and last id."""

    event: str
    data: str
    id: str | None = None


class SSEParser:
    """Turns a stream of text chunks into :class:`SSEMessage` values.

    Lines may end with ``\\n``, ``\\r\\n`` or ``\\r``; a blank line dispatches the event;
    comment lines (``:``) are ignored; ``data`` lines are joined with ``\\n``; an event with no
    ``data`` line is not dispatched (as in browsers).
    """

    __slots__ = ("_buffer", "_data", "_event", "_has_data", "last_id")

    def __init__(self) -> None:
        self._buffer = ""
        self._event = ""
        self._data: list[str] = []
        self._has_data = False
        self.last_id: str | None = None

    def feed(self, chunk: str) -> list[SSEMessage]:
        """Consume ``chunk``; return the messages it completed (possibly none)."""
        self._buffer += chunk
        out: list[SSEMessage] = []
        while True:
            cut, width = _line_end(self._buffer)
            if cut < 0:
                return out
            line = self._buffer[:cut]
            self._buffer = self._buffer[cut + width :]
            message = self._line(line)
            if message is not None:
                out.append(message)

    def _line(self, line: str) -> SSEMessage | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "id" and "\0" not in value:
            self.last_id = value
        return None

    def _dispatch(self) -> SSEMessage | None:
        if not self._has_data:
            self._event = ""
            return None
        message = SSEMessage(self._event or "message", "\n".join(self._data), self.last_id)
        self._event = ""
        self._data = []
        self._has_data = False
        return message


def _line_end(buffer: str) -> tuple[int, int]:
    """Index and width of the first line terminator, or (-1, 0).

    A trailing ``\\r`` is not yet a terminator: the next chunk may start with ``\\n``.
    """
    lf = buffer.find("\n")
    cr = buffer.find("\r", 0, lf if lf >= 0 else len(buffer))
    if cr < 0:
        return (lf, 1) if lf >= 0 else (-1, 0)
    if cr + 1 == len(buffer):
        return -1, 0
    return cr, 2 if buffer[cr + 1] == "\n" else 1
