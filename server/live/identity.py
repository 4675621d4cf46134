"""Inferred programs: calls that carry no program identity, grouped by their prefix chain.

An unmodified agent resends its whole conversation on every call, so call k+1's messages
start with call k's. :class:`PrefixChains` remembers, per tenant, a hash of every call's
message list; a new call joins the program of the longest earlier message list that is a
prefix of its own (its parent is that call's node), else it starts a new program; a link
into a program that has ended is ignored by the caller. Hashes are
chained over canonical JSON of each message, so a lookup costs one hash per message. Memory is
bounded (least recently used entries go first).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

Link = tuple[str, str]  # (program_id, node_id)


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
    """Tenant-scoped map from a call's message-list hash to its (program, node)."""

    def __init__(self, capacity: int = 200_000) -> None:
        self._capacity = capacity
        self._links: OrderedDict[tuple[str, bytes], Link] = OrderedDict()

    def __len__(self) -> int:
        return len(self._links)

    def find(self, tenant: str, hashes: Sequence[bytes]) -> Link | None:
        """The (program, node) of the longest recorded prefix of ``hashes`` for ``tenant``."""
        for digest in reversed(hashes):
            link = self._links.get((tenant, digest))
            if link is not None:
                self._links.move_to_end((tenant, digest))
                return link
        return None

    def record(self, tenant: str, hashes: Sequence[bytes], program_id: str, node_id: str) -> None:
        """Remember that ``tenant``'s call with these messages ran as ``program_id/node_id``."""
        if not hashes:
            return
        key = (tenant, hashes[-1])
        self._links[key] = (program_id, node_id)
        self._links.move_to_end(key)
        while len(self._links) > self._capacity:
            self._links.popitem(last=False)
