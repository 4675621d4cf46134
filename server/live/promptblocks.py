"""Recording each LLM call's prompt structure: salted hashes of its fixed-size token blocks.

The prompt is cut into blocks of ``BLOCK_TOKENS`` tokens from its start (as a paged prefix
cache cuts it); a trailing partial block is not hashed (no prefix cache could reuse it either).
Tokens are the runtime's token ids when the server tokenized the prompt (SGLang), else the
simulator's tokens, four characters each (``chatformat.CHARS_PER_TOKEN``).

Each block's hash is ``BLAKE2b-64(block, key=tenant salt)``, the tenant salt being
``BLAKE2b-256(tenant, key=server secret)``: the same block of two tenants hashes differently,
so the store never shows that two tenants sent the same text, and a hash can be checked against
a guess only with the server's secret. Blocks are hashed one by one, not chained: two calls
share a prefix of as many blocks as their leading hashes agree position by position, and a block
that reappears elsewhere (after a mid-prompt insertion) still hashes the same.

A tenant whose tool data redaction is ``none`` gets rows without hashes (only the counts).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Iterator, Sequence

from agentconsole.server.live.chatformat import CHARS_PER_TOKEN
from agentconsole.server.store.prompt_blocks import BLOCK_TOKENS, MAX_BLOCKS, PromptBlocksRecord
from agentconsole.server.store.records import Record

#: tenant -> its redaction of stored data (``full``, ``hash`` or ``none``)
RedactionOf = Callable[[str], str]


def _no_redaction(tenant: str) -> str:
    del tenant
    return "full"


def redaction_from(extensions: Sequence[object]) -> RedactionOf:
    """The tool-data redaction the server's extensions apply (the tool gateway's
    ``config.redaction_for``: ``privacy.tool_data`` and ``privacy.tenants``), so prompt
    structure follows the same per-tenant setting; ``full`` for all without a gateway."""
    for extension in extensions:
        lookup = getattr(getattr(extension, "config", None), "redaction_for", None)
        if callable(lookup):
            return lambda tenant: str(lookup(tenant))
    return _no_redaction


class BlockHasher:
    """Per-tenant salted block hashes under one server secret."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._salts: dict[str, bytes] = {}

    def salt(self, tenant: str) -> bytes:
        salt = self._salts.get(tenant)
        if salt is None:
            salt = hashlib.blake2b(tenant.encode(), key=self._secret, digest_size=32).digest()
            self._salts[tenant] = salt
        return salt

    def hashes(self, tenant: str, blocks: Iterator[bytes]) -> tuple[int, ...]:
        """The signed 64-bit hash of each block (at most ``MAX_BLOCKS``)."""
        salt = self.salt(tenant)
        out: list[int] = []
        for block in blocks:
            if len(out) >= MAX_BLOCKS:
                break
            digest = hashlib.blake2b(block, key=salt, digest_size=8).digest()
            out.append(int.from_bytes(digest, "little", signed=True))
        return tuple(out)


def token_blocks(prompt_ids: Sequence[int] | None, text: str) -> Iterator[bytes]:
    """The full blocks of a prompt as bytes: of its token ids when known, else of its text
    at four characters a token (what the simulator counts)."""
    if prompt_ids is not None:
        for start in range(0, len(prompt_ids) - BLOCK_TOKENS + 1, BLOCK_TOKENS):
            yield array("q", prompt_ids[start : start + BLOCK_TOKENS]).tobytes()
        return
    width = BLOCK_TOKENS * CHARS_PER_TOKEN
    data = text.encode()
    # characters, not bytes, make the simulator's tokens; most prompts are ASCII (one each)
    if len(data) != len(text):
        for start in range(0, len(text) - width + 1, width):
            yield text[start : start + width].encode()
        return
    for start in range(0, len(data) - width + 1, width):
        yield data[start : start + width]


class PromptBlockRecorder:
    """Writes a :class:`PromptBlocksRecord` for every call that ends (through ``put``)."""

    def __init__(
        self,
        secret: bytes,
        put: Callable[[Record], None],
        redaction_of: RedactionOf = _no_redaction,
    ) -> None:
        self.hasher = BlockHasher(secret)
        self.put = put
        self.redaction_of = redaction_of

    def record(
        self,
        *,
        program_id: str,
        node_id: str,
        attempt: int,
        call_id: str,
        tenant: str,
        ts: float,
        prompt: tuple[Sequence[int] | None, str],
        prompt_tokens: int,
        cached_tokens: int,
    ) -> PromptBlocksRecord:
        """Hash ``prompt`` (token ids or ``None``, text), queue its row and return it."""
        redacted = self.redaction_of(tenant)
        blocks: tuple[int, ...] = ()
        if redacted != "none":
            blocks = self.hasher.hashes(tenant, token_blocks(*prompt))
        row = PromptBlocksRecord(
            program_id=program_id,
            node_id=node_id,
            attempt=attempt,
            call_id=call_id,
            tenant=tenant,
            ts=ts,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached_tokens,
            blocks=blocks,
            redacted="none" if redacted == "none" else "",
        )
        self.put(row)
        return row
