"""Prompt structure of every LLM call, without its text: salted hashes of fixed-size blocks.

One row per finished (or aborted) call attempt: its prompt cut into blocks of
:data:`BLOCK_TOKENS` tokens, each block's keyed hash (an 8-byte BLAKE2b digest under the
tenant's salt, see ``server/live/promptblocks.py``), at most :data:`MAX_BLOCKS` of them, plus
the prompt and cached token counts. Two calls whose leading hashes are equal share that many
blocks of prompt prefix; nothing in a row can be turned back into text without the secret and a
guess of the whole block. The secret lives in ``prompt_hash_secret``, a table of the main file
that Parquet export leaves out (it is not in ``schema.TABLES``).

Size: 8 bytes a block, so at most ``8 * MAX_BLOCKS`` = 16 KiB of hashes per call (a 131,072-token
prompt) plus ~100 bytes of ids and counts; docs/API.md states it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import pyarrow as pa

from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.store.tablespec import FLOAT, INT, STR, Kind, TableRecord, TableSpec

#: Tokens a block hashes: a paged prefix cache's page (SGLang/vLLM default sizes are 16-64;
#: 64 keeps rows small and is the simulator's block too).
BLOCK_TOKENS = 64
#: Blocks kept per call: the first 131,072 tokens (the Llama 3.1 presets' whole window).
MAX_BLOCKS = 2048
#: The table holding the server's hashing secret (one row; never exported).
SECRET_TABLE = "prompt_hash_secret"

#: A list of signed 64-bit hashes.
HASH_LIST = Kind(
    "BIGINT[]", pa.list_(pa.int64()), encode=list, decode=lambda v: tuple(int(x) for x in v or ())
)


@dataclass(frozen=True, slots=True)
class PromptBlocksRecord(TableRecord):
    """One call attempt's prompt structure. ``blocks`` is empty when the tenant's redaction is
    ``none`` (``redacted`` says so) or the prompt is shorter than one block."""

    program_id: str
    node_id: str
    attempt: int
    call_id: str
    tenant: str
    ts: float
    prompt_tokens: int
    cached_tokens: int
    block_tokens: int = BLOCK_TOKENS
    blocks: tuple[int, ...] = ()
    redacted: str = ""


PromptBlocksRecord.SPEC = TableSpec(
    "prompt_blocks",
    (
        ("program_id", STR),
        ("node_id", STR),
        ("attempt", INT),
        ("call_id", STR),
        ("tenant", STR),
        ("ts", FLOAT),
        ("prompt_tokens", INT),
        ("cached_tokens", INT),
        ("block_tokens", INT),
        ("blocks", HASH_LIST),
        ("redacted", STR),
    ),
    key=("call_id",),
)

#: The migration's statements (frozen history: never derived from the spec above).
MIGRATION_DDL = (
    """CREATE TABLE prompt_blocks (
        program_id VARCHAR NOT NULL, node_id VARCHAR NOT NULL, attempt INTEGER NOT NULL,
        call_id VARCHAR NOT NULL, tenant VARCHAR NOT NULL, ts DOUBLE NOT NULL,
        prompt_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
        block_tokens INTEGER NOT NULL, blocks BIGINT[] NOT NULL, redacted VARCHAR NOT NULL)""",
    f"CREATE TABLE {SECRET_TABLE} (secret VARCHAR NOT NULL)",
)


def hashing_secret(con: SqlConnection) -> bytes:
    """The store's prompt-hashing secret, made (32 random bytes) on first use.

    Called once at start-up, before the writer runs, so no other transaction races it."""
    row = con.execute(f"SELECT secret FROM {SECRET_TABLE} LIMIT 1").fetchone()
    if row is not None:
        return bytes.fromhex(str(row[0]))
    secret = secrets.token_bytes(32)
    con.execute(f"INSERT INTO {SECRET_TABLE} VALUES (?)", [secret.hex()])
    return secret
