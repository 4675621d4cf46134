"""Reading a body of unknown length without holding more of it than a cap."""

from __future__ import annotations

from collections.abc import AsyncIterator


async def read_at_most(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """The bytes of ``chunks``, read until more than ``limit`` came (the rest is never read);
    longer than ``limit`` means cut off. An inbound request or a tool's answer of any size
    costs at most one chunk past the cap."""
    kept: list[bytes] = []
    size = 0
    async for chunk in chunks:
        kept.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(kept)
