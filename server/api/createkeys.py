"""``Idempotency-Key`` on ``POST /v1/programs``: a retried create is answered with the program
its first attempt opened (Stripe's semantics, and the IETF draft "The Idempotency-Key HTTP
Header Field").

Agent frameworks retry a POST after their own timeout, a dropped connection or a restart of
the server. Without a key a retry of a create that named its program is told 409 "exists"
(unless the server itself refused the first attempt: :mod:`refusedcreates`), and one with a
server-chosen id opens a second program. With a key, ``(tenant, key)`` is remembered as the
program the create opened and the digest of its body (every field, ``program_id`` included,
in one canonical text): the same tenant's create with the same key and body is answered 201
with that program as it is now (running, ended, after a restart alike), one with another body
422 ``idempotency_mismatch``, never opening a program. Keys are per tenant: another tenant's
same key is another key, and no answer depends on it.

Durable: each keyed create appends a row (``server/store/idempotency.py``) that commits with the
program's creation, before the 201. Recent keys are held in memory; the others are ruled out
by a filter of the stored keys (read once, at the first keyed create after a start), so a new
key costs no store read and a stored one (or ~1% of the new ones) one read of the key's rows.

Two creates of one key at once are one create: each holds the key's claim
(:meth:`CreateKeys.claim`) from the lookup until its answer, so the second finds the program
the first opened. A key lasts as long as its program's stored rows (there is no retention of
stored programs today; the row names its program, to go with it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated

from litestar.params import HeaderParameter

from agentconsole.server.api.errors import ApiError
from agentconsole.server.api.schemas import ProgramCreate
from agentconsole.server.live.ownership import StoredNames
from agentconsole.server.store.idempotency import (
    IdempotencyKeyRecord,
    key_name,
    stored_key,
    stored_key_names,
)
from agentconsole.server.store.store import Store

IDEMPOTENCY_HEADER = "Idempotency-Key"
#: visible ASCII (a UUID, a hash, a random token), 1 to 255 characters: Stripe's bound
KEY_PATTERN = r"^[!-~]{1,255}$"
IdempotencyKey = Annotated[
    str | None,
    HeaderParameter(
        name=IDEMPOTENCY_HEADER,
        required=False,
        pattern=KEY_PATTERN,
        min_length=1,
        max_length=255,
        description=(
            "Makes the create safe to retry: the same tenant's create with the same key and"
            " the same body is answered 201 with the program the first one opened (also after"
            " a restart); with another body 422 idempotency_mismatch. Visible ASCII, 1-255"
            " characters; per tenant; kept as long as the program's stored rows."
        ),
    ),
]
#: keyed creates held in memory (oldest forgotten first: the store keeps them all)
MAX_RECENT_KEYS = 100_000


def request_sha256(data: ProgramCreate) -> str:
    """The digest of the whole body of a create (``program_id`` included), in one canonical
    text: what a retry with the same key must repeat."""
    body = data.model_dump(mode="json", exclude_none=True)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def key_reused(key: str) -> ApiError:
    """A key sent again with another body. 422 ``idempotency_mismatch``, as the tool gateway
    answers a ``tool_call_id`` called again with other arguments (and as the IETF draft says):
    the request is well-formed, its key is misused; not 409, which this API keeps for a state
    that forbids the change (and OpenAI's clients retry)."""
    error = ApiError(
        422,
        f"{IDEMPOTENCY_HEADER} {key!r} was first sent with another body; send a new key to"
        " create another program",
        type="idempotency_mismatch",
        field=IDEMPOTENCY_HEADER,
    )
    error.retryable = False
    return error


@dataclass(frozen=True, slots=True)
class KeyedCreate:
    """What a tenant's key opened: its program, and the digest of the body that opened it."""

    program_id: str
    request_sha256: str


@dataclass(slots=True)
class _Claim:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    holders: int = 0


class CreateKeys:
    """The keyed creates of one app (event-loop only); see the module docstring."""

    def __init__(self, limit: int = MAX_RECENT_KEYS) -> None:
        self._limit = limit
        self._recent: dict[str, KeyedCreate] = {}
        #: every stored key's name, once read (None before the first keyed create)
        self._stored: StoredNames | None = None
        self._loading = asyncio.Lock()
        self._claims: dict[str, _Claim] = {}

    @asynccontextmanager
    async def claim(self, tenant: str, key: str) -> AsyncIterator[None]:
        """Hold ``tenant``'s ``key`` until the block ends: a create of the same key waits, so
        the lookup and the opening are never split by another create of that key."""
        name = key_name(tenant, key)
        claim = self._claims.setdefault(name, _Claim())
        claim.holders += 1
        try:
            async with claim.lock:
                yield
        finally:
            claim.holders -= 1
            if claim.holders == 0:
                del self._claims[name]

    async def find(self, store: Store, tenant: str, key: str) -> KeyedCreate | None:
        """What ``tenant``'s ``key`` opened before (in this run or a previous one), or None.
        Call it under :meth:`claim`."""
        name = key_name(tenant, key)
        recent = self._recent.get(name)
        if recent is not None:
            return recent
        stored = await self._stored_names(store)
        if not stored.may_hold(name):
            return None
        row = await asyncio.to_thread(_read_key, store, tenant, key)
        return KeyedCreate(row.program_id, row.request_sha256) if row is not None else None

    def remember(
        self, tenant: str, key: str, program_id: str, request: str
    ) -> IdempotencyKeyRecord:
        """``tenant``'s ``key`` opened ``program_id`` with a body of digest ``request``; returns
        the row the caller hands the store before the commit its answer waits for. Only after
        :meth:`find` of the key (which read the stored keys before anything was remembered)."""
        name = key_name(tenant, key)
        self._recent.pop(name, None)
        if len(self._recent) >= self._limit:
            del self._recent[next(iter(self._recent))]
        self._recent[name] = KeyedCreate(program_id, request)
        if self._stored is not None:
            self._stored.add(name)
        return IdempotencyKeyRecord(tenant, key, program_id, request, time.time())

    async def _stored_names(self, store: Store) -> StoredNames:
        """The filter of stored keys, read on first use. Every :meth:`find` waits for the read,
        and :meth:`remember` follows a find, so no key is remembered while it runs."""
        if self._stored is None:
            async with self._loading:
                if self._stored is None:
                    self._stored = await asyncio.to_thread(_read_key_names, store)
        return self._stored


def _read_key(store: Store, tenant: str, key: str) -> IdempotencyKeyRecord | None:
    with store.cursor() as cur:
        return stored_key(cur, tenant, key)


def _read_key_names(store: Store) -> StoredNames:
    with store.cursor() as cur:
        return StoredNames(stored_key_names(cur))
