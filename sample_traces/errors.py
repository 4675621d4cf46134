"""The one error type of the trace format: :class:`TraceError`, which names the line and field."""

from __future__ import annotations


class TraceError(ValueError):
    """A trace (or one program of it) is malformed.

    ``field`` is a dotted path inside one program line (``nodes[3].parents``); ``line`` is the
    1-based line of the JSONL file, when known. ``str(error)`` renders both before the message,
    e.g. ``line 7: nodes[3].parents: unknown parent 'n9'``.
    """

    def __init__(self, message: str, *, field: str = "", line: int | None = None) -> None:
        self.message = message
        self.field = field
        self.line = line
        super().__init__(self._render())

    def _render(self) -> str:
        parts: list[str] = []
        if self.line is not None:
            parts.append(f"line {self.line}")
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)

    def within(self, prefix: str) -> TraceError:
        """A copy whose field path starts with ``prefix``, an enclosing field like ``nodes[2]``."""
        if not self.field:
            field = prefix
        elif self.field.startswith("["):
            field = prefix + self.field
        else:
            field = f"{prefix}.{self.field}"
        return TraceError(self.message, field=field, line=self.line)

    def at_line(self, line: int) -> TraceError:
        """A copy that names ``line``; an already-known line is kept."""
        known = self.line if self.line is not None else line
        return TraceError(self.message, field=self.field, line=known)
