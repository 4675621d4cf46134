"""What one tenant's tool registry may hold (``limits.tools``, ``limits.tool_bytes``).

Every registered tool is held in memory with its compiled validator for as long as it is
registered, and every listing reads the registry: without a bound one tenant's registrations
would grow the server's memory and its listings without end. Platform tools (the operator's)
are not bounded: they are the server's own configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

#: tools one tenant may register by default: twice what a chat call may declare (OpenAI's API
#: takes 128 tools a request), far past any agent's toolset
DEFAULT_TOOLS = 256
#: bytes of one tenant's tool definitions together by default (each counted as its stored
#: row, ``registry.stored_bytes``): a 16 KiB schema for each of :data:`DEFAULT_TOOLS` tools, or
#: 64 tools at the largest body a registration may have (64 KiB); about twice this in memory
#: once parsed
DEFAULT_TOOL_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ToolBounds:
    """The per-tenant bounds of the tool registry: ``tools`` registered at once, and
    ``tool_bytes`` of their stored definitions together."""

    tools: int = DEFAULT_TOOLS
    tool_bytes: int = DEFAULT_TOOL_BYTES

    def __post_init__(self) -> None:
        if self.tools < 1 or self.tool_bytes < 1:
            raise ValueError(f"tool bounds must be at least 1, got {self}")
