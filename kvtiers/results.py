"""What prefix-index operations return, and the index's cumulative counters.

Plain slotted dataclasses so the simulator can turn them into events without copying. Token
lists are indexed by :class:`~agentconsole.kvtiers.tiers.Tier` (``x[Tier.DRAM]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentconsole.kvtiers.node import Node
from agentconsole.kvtiers.tiers import Tier


@dataclass(slots=True)
class Match:
    """The longest resident prefix of a context.

    ``path`` holds the matched nodes root-first (fastest tiers first, since tiers never get
    faster going down the tree); ``tokens_by_tier[t]`` is how many hit tokens live on tier
    ``t``; ``requested_tokens`` is the size of the whole context that was looked up.
    """

    path: list[Node]
    tokens_by_tier: list[int]
    requested_tokens: int

    @property
    def hit_tokens(self) -> int:
        """Hit tokens on any tier."""
        return sum(self.tokens_by_tier)

    @property
    def miss_tokens(self) -> int:
        """Tokens of the context with no resident KV (to be prefilled)."""
        return self.requested_tokens - self.hit_tokens

    def tokens_on(self, tier: Tier) -> int:
        """Hit tokens on ``tier``."""
        return self.tokens_by_tier[tier]


@dataclass(slots=True)
class InsertResult:
    """Outcome of an insert.

    ``new_tokens`` were newly allocated on the target tier (new nodes plus nodes promoted to
    it); ``path`` is the full node path of the inserted prefix, root-first; ``complete`` is
    False when the target tier ran out of free space and the tail was not inserted.
    """

    new_tokens: int
    path: list[Node]
    complete: bool


@dataclass(frozen=True, slots=True)
class KVMove:
    """One node's KV changed tier (``dst`` set) or was dropped (``dst is None``).

    ``evicted`` is True when the index did it to make room (eviction, possibly cascaded), False
    when the caller asked for it (``move``/``drop``).
    """

    node: Node
    tokens: int
    src: Tier
    dst: Tier | None
    evicted: bool = False

    @property
    def owner(self) -> str | None:
        """Program the moved KV is attributed to."""
        return self.node.owner


@dataclass(slots=True)
class EvictionResult:
    """What ``make_room``/``evict`` did on ``tier`` at time ``at``.

    ``freed`` tokens left ``tier``; ``ok`` says whether the request was met (False only when
    what remains is locked or reserved). ``moves`` lists every demotion and drop, including
    cascaded ones on slower tiers, in the order they happened.
    """

    tier: Tier
    requested: int
    at: float
    freed: int = 0
    ok: bool = True
    moves: list[KVMove] = field(default_factory=list)

    @property
    def demoted_tokens(self) -> int:
        """Tokens moved to a slower tier (all tiers)."""
        return sum(m.tokens for m in self.moves if m.dst is not None)

    @property
    def dropped_tokens(self) -> int:
        """Tokens dropped from the index (all tiers)."""
        return sum(m.tokens for m in self.moves if m.dst is None)

    def owners(self) -> set[str]:
        """Programs whose KV was demoted or dropped."""
        return {m.node.owner for m in self.moves if m.node.owner is not None}


@dataclass(slots=True)
class MoveResult:
    """What an explicit ``move``/``drop`` did.

    ``moved_tokens`` changed tier (or were dropped, for ``drop``); ``skipped_tokens`` were not
    moved because they were locked, dead, or no room could be made; ``moves`` lists, in the
    order they happened, the requested moves and the evictions done to make room for them
    (``KVMove.evicted``).
    """

    tier: Tier | None
    moved_tokens: int = 0
    skipped_tokens: int = 0
    moves: list[KVMove] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True if nothing was skipped."""
        return self.skipped_tokens == 0

    @property
    def evicted_tokens(self) -> int:
        """Tokens demoted or dropped to make room (all tiers)."""
        return sum(m.tokens for m in self.moves if m.evicted)


@dataclass(slots=True)
class Counters:
    """Cumulative token counts of a prefix index (lists indexed by tier)."""

    matches: int = 0
    lookup_tokens: int = 0
    hit_tokens: list[int] = field(default_factory=lambda: [0, 0, 0])
    inserted_tokens: int = 0
    promoted_tokens: list[int] = field(default_factory=lambda: [0, 0, 0])
    demoted_tokens: list[int] = field(default_factory=lambda: [0, 0, 0])
    dropped_tokens: list[int] = field(default_factory=lambda: [0, 0, 0])
    evicted_tokens: list[int] = field(default_factory=lambda: [0, 0, 0])

    @property
    def total_hit_tokens(self) -> int:
        """Hit tokens over all tiers."""
        return sum(self.hit_tokens)

    @property
    def hit_ratio(self) -> float:
        """Hit tokens / looked-up tokens (0 before any lookup)."""
        return self.total_hit_tokens / self.lookup_tokens if self.lookup_tokens else 0.0
