"""Inferred programs: calls that carry no program identity, grouped by their prefix chain.

An unmodified agent resends its whole conversation on every call, so call k+1's messages
start with call k's. :class:`PrefixChains` remembers, per tenant, a hash of every call's
message list; a new call joins the program of the longest earlier message list that is a
prefix of its own (its parent is that call's node), else it starts a new program; a link
into a program that has ended is ignored by the caller. Hashes are
chained over canonical JSON of each message, so a lookup costs one hash per message.

Memory is bounded per tenant and in all: each tenant keeps its own least-recently-used book
of links, so a tenant flooding distinct calls evicts its own oldest links, never another
tenant's (whose agents would otherwise lose their programs and queue at the door again as new
ones). Past the total bound the tenant holding the most links gives up its oldest one.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

Link = tuple[str, str]  # (program_id, node_id)

#: links one tenant keeps: a link is one call (about 340 bytes), and only recent calls
#: matter (an inferred program idles out after 300 s), so 100,000 hold a thousand chats of a
#: hundred turns each
PER_TENANT_LINKS = 100_000
#: links all tenants keep together (about 140 MB): four tenants at their own bound never
#: touch each other's links; with more, the tenant holding the most gives way first
TOTAL_LINKS = 400_000


def chain_hashes(messages: Sequence[Mapping[str, Any]]) -> list[bytes]:
    """``h[i]`` identifies ``messages[: i + 1]``."""
    out: list[bytes] = []
    digest = b""
    for message in messages:
        canonical = json.dumps(message, sort_keys=True, separators=(",", ":"), default=str)
        digest = hashlib.blake2b(digest + canonical.encode(), digest_size=16).digest()
        out.append(digest)
    return out


class PrefixChains:
    """Tenant-scoped map from a call's message-list hash to its (program, node).

    Each tenant has its own LRU book of at most ``per_tenant`` links; all books together
    hold at most ``total``. Past ``total`` the largest book loses its least recently used
    link (the recording tenant's own on a tie), so a tenant never shrinks another below its
    own size. Every operation is O(1) per hash: books are found by tenant, and the largest
    is tracked by size buckets (sizes change by one at a time).
    """

    def __init__(self, per_tenant: int = PER_TENANT_LINKS, total: int = TOTAL_LINKS) -> None:
        if per_tenant < 1 or total < 1:
            raise ValueError("PrefixChains bounds must be at least 1")
        self._per_tenant = per_tenant
        self._total = total
        self._books: dict[str, OrderedDict[bytes, Link]] = {}
        self._size = 0
        #: book size -> the tenants whose book has that size (a dict as an ordered set)
        self._by_size: dict[int, dict[str, None]] = {}
        self._largest = 0

    def __len__(self) -> int:
        return self._size

    def held(self, tenant: str) -> int:
        """How many links ``tenant``'s book holds."""
        book = self._books.get(tenant)
        return 0 if book is None else len(book)

    def find(self, tenant: str, hashes: Sequence[bytes]) -> Link | None:
        """The (program, node) of the longest recorded prefix of ``hashes`` for ``tenant``."""
        book = self._books.get(tenant)
        if book is None:
            return None
        for digest in reversed(hashes):
            link = book.get(digest)
            if link is not None:
                book.move_to_end(digest)
                return link
        return None

    def record(self, tenant: str, hashes: Sequence[bytes], program_id: str, node_id: str) -> None:
        """Remember that ``tenant``'s call with these messages ran as ``program_id/node_id``."""
        if not hashes:
            return
        digest = hashes[-1]
        book = self._books.get(tenant)
        if book is None:
            book = self._books[tenant] = OrderedDict()
        if digest in book:
            book[digest] = (program_id, node_id)
            book.move_to_end(digest)
            return
        book[digest] = (program_id, node_id)
        self._resized(tenant, len(book) - 1, len(book))
        self._size += 1
        if len(book) > self._per_tenant:
            self._evict(tenant)
        while self._size > self._total:
            self._evict(self._victim(tenant))

    def _victim(self, recorder: str) -> str:
        """The tenant that gives up a link past the total bound: the one holding the most,
        ``recorder`` itself when it is among them."""
        largest = self._by_size[self._largest]
        return recorder if recorder in largest else next(iter(largest))

    def _evict(self, tenant: str) -> None:
        """Drop ``tenant``'s least recently used link (and its book once empty)."""
        book = self._books[tenant]
        book.popitem(last=False)
        self._size -= 1
        self._resized(tenant, len(book) + 1, len(book))
        if not book:
            del self._books[tenant]

    def _resized(self, tenant: str, before: int, after: int) -> None:
        """Move ``tenant`` between size buckets; sizes change by one, so the largest size
        moves by at most one too."""
        if before:
            bucket = self._by_size[before]
            del bucket[tenant]
            if not bucket:
                del self._by_size[before]
        if after:
            self._by_size.setdefault(after, {})[tenant] = None
        grew_past = after > self._largest
        if grew_past or (before == self._largest and before not in self._by_size):
            self._largest = after
