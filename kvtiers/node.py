"""The units of the prefix index: a :class:`Block` of context and a :class:`Node` of the tree.

A context is a sequence of blocks. In the simulator a block is a whole segment (an 80K shared
system prefix, one round's tool result); in the live server it is a 16-token chunk keyed by a
hash chain. A block may be shared across tenants only when it is ``public`` *and* every block
before it is public; the index enforces that, so a block's ``public`` flag is a permission, not
a guarantee of sharing.

:class:`Node` is mutable state owned by :class:`~agentconsole.kvtiers.prefix_index.PrefixIndex`;
callers receive nodes in match paths and results and may read them, but must change them only
through the index.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from agentconsole.kvtiers.tiers import Tier


@dataclass(frozen=True, slots=True)
class Block:
    """One block of context: an identity ``key``, its size in ``tokens`` (> 0) and sharing."""

    key: Hashable
    tokens: int
    public: bool = False

    def __post_init__(self) -> None:
        if self.tokens <= 0:
            raise ValueError(f"block tokens must be > 0, got {self.tokens}")


class PrivateKey:
    """How a tenant's first private block is keyed under a public parent.

    A distinct class (not a tuple) so that no public key can ever compare equal to it.
    Written out rather than a frozen dataclass: the dataclass's generated ``__eq__`` and
    ``__hash__`` stay interpreted Python even in the compiled build, and the index hashes
    these keys on every match below a public prefix.
    """

    __slots__ = ("key", "tenant")

    def __init__(self, tenant: str, key: Hashable) -> None:
        self.tenant = tenant
        self.key = key

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PrivateKey) and self.tenant == other.tenant and self.key == other.key
        )

    def __hash__(self) -> int:
        return hash((self.tenant, self.key))

    def __repr__(self) -> str:
        return f"PrivateKey(tenant={self.tenant!r}, key={self.key!r})"


class Node:
    """A resident block of KV in the radix tree.

    Attributes (read-only for callers):

    * ``key``, ``tokens``: the block this node holds; ``tier``: where its KV lives.
    * ``tenant``: ``None`` for a public (shared) node, else the owning tenant's namespace.
    * ``owner``: the program id that first inserted it (for attribution in events).
    * ``parent``, ``children``: tree links; ``children`` maps the namespaced key to the child.
    * ``lock_count``: running calls using it (locked nodes are never evicted or moved away).
    * ``last_access``: time of the last match or insert that reached it.
    * ``retain_until``: soft-retention deadline (``-inf`` when not retained).
    * ``queued_holds``: queued calls waiting to use it (a soft hold, see
      :meth:`~agentconsole.kvtiers.prefix_index.PrefixIndex.hold`).
    * ``dead``: True once the node was dropped from the index.
    * ``lands_at``: when a copy moving it to its tier (a reload) ends: its KV can be read
      from then on (``-inf``: it is there).
    """

    __slots__ = (
        "child_tiers",
        "children",
        "dead",
        "heap_key",
        "key",
        "lands_at",
        "last_access",
        "lock_count",
        "owner",
        "parent",
        "queued_holds",
        "retain_until",
        "slot",
        "stamp",
        "tenant",
        "tier",
        "tokens",
    )

    def __init__(
        self,
        key: Hashable,
        slot: Hashable,
        tokens: int,
        tier: Tier,
        parent: Node | None,
        tenant: str | None,
        owner: str | None,
        now: float,
    ) -> None:
        self.key = key
        #: the key under which the parent's ``children`` dict stores this node
        self.slot = slot
        self.tokens = tokens
        self.tier = tier
        self.parent = parent
        self.tenant = tenant
        self.owner = owner
        self.children: dict[Hashable, Node] = {}
        #: number of children on each tier (indexed by ``Tier``): O(1) "is a leaf on my tier"
        self.child_tiers = [0, 0, 0]
        self.lock_count = 0
        self.last_access = now
        self.retain_until = -float("inf")
        self.queued_holds = 0
        self.dead = False
        self.lands_at = -float("inf")
        #: eviction-heap bookkeeping: the stamp of this node's live heap entry (-1 = none)
        self.stamp = -1
        self.heap_key = 0.0

    @property
    def public(self) -> bool:
        """True if the node is in the shared (public) namespace."""
        return self.tenant is None

    def __repr__(self) -> str:
        ns = "public" if self.tenant is None else self.tenant
        return (
            f"Node({self.key!r}, {self.tokens}t, {self.tier.name}, {ns}, locks={self.lock_count})"
        )
