"""Prefix segments recovered from recorded prompt block hashes.

Programs whose first calls start with the same block hashes shared that much prompt prefix
(a system prompt, a tenant profile, a repository snapshot). Per tenant (hashes are salted per
tenant, so nothing is ever shared across tenants and every recovered segment is private), the
first calls' chains form a trie; a program's prefix is its chain up to the deepest block it
shares with another program, cut into one segment at every depth where the set of programs
sharing it changes. A segment's id names the blocks it ends at, so two programs get the same
segment id exactly when they share those blocks, as the trace format requires.

A program's prefix also never goes past what every one of its calls starts with (a trace's
prefix opens every call's context).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentconsole.sample_traces import PrefixSegment


def common_blocks(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading blocks ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class ProgramChains:
    """What one program contributes: its first call's blocks, and how far all of its calls
    agree with that chain (``limit``, in blocks)."""

    program_id: str
    tenant: str
    first: tuple[int, ...]
    limit: int
    block_tokens: int


def _segment_id(tenant: str, chain: Sequence[int], start: int, end: int) -> str:
    digest = hashlib.blake2b(array("q", chain[:end]).tobytes(), digest_size=8).hexdigest()
    return f"{tenant}/shared-{start}-{end}-{digest}"


def shared_prefixes(programs: Sequence[ProgramChains]) -> Mapping[str, tuple[PrefixSegment, ...]]:
    """Each program's recovered prefix segments (programs sharing nothing get none).

    Quadratic in the programs of one tenant, which is what one export window holds (a trie
    would be linear; a few thousand programs take well under a second this way)."""
    by_tenant: dict[str, list[ProgramChains]] = {}
    for chains in programs:
        by_tenant.setdefault(chains.tenant, []).append(chains)
    out: dict[str, tuple[PrefixSegment, ...]] = {}
    for group in by_tenant.values():
        for chains in group:
            depths = {
                common_blocks(chains.first, other.first)
                for other in group
                if other is not chains and other.block_tokens == chains.block_tokens
            }
            deepest = min(max(depths, default=0), chains.limit)
            cuts = sorted({d for d in depths if 0 < d < deepest} | {deepest})
            segments, start = [], 0
            for end in cuts:
                if end <= 0:
                    continue
                segments.append(
                    PrefixSegment(
                        id=_segment_id(chains.tenant, chains.first, start, end),
                        tokens=(end - start) * chains.block_tokens,
                    )
                )
                start = end
            out[chains.program_id] = tuple(segments)
    return out
