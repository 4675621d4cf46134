"""Memory tiers for KV cache: which tiers exist, how big they are, how fast they move KV.

Owns :class:`Tier` (HBM, DRAM, DISK, fastest first), :class:`TierSpec` (capacity in tokens and
the bandwidth of the tier's link to HBM) and :class:`TierModel` (bytes per token plus the specs).
The GPU/model cost model lives elsewhere and builds a :class:`TierModel` from plain numbers with
:meth:`TierModel.build`.

Transfers between two tiers are limited by the slower of the two tiers' links to HBM (HBM's own
link is infinitely fast), plus the fixed per-transfer latency of each non-HBM endpoint:
``seconds = bytes / min(bw_src, bw_dst) + latency_src + latency_dst``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum


class Tier(IntEnum):
    """A place KV can live; ordered fastest first, so ``tier + 1`` is the next slower tier."""

    HBM = 0
    DRAM = 1
    DISK = 2


#: Every tier, fastest first (index ``i`` holds ``Tier(i)``).
ALL_TIERS: tuple[Tier, ...] = (Tier.HBM, Tier.DRAM, Tier.DISK)

#: When HBM's KV is copied to the host tier, by SGLang's names (``--hicache-write-policy``):
#: ``write_through``, SGLang's default, copies every node as it is inserted (HBM's KV then has
#: a copy on DRAM, which takes DRAM's room); ``write_back`` copies a node when it is evicted,
#: and the engine runs no pass until the copy is done
WRITE_THROUGH = "write_through"
WRITE_BACK = "write_back"
HOST_WRITE_POLICIES: tuple[str, ...] = (WRITE_THROUGH, WRITE_BACK)


@dataclass(frozen=True, slots=True)
class TierSpec:
    """Size of one tier and speed of its link to HBM.

    ``capacity_tokens`` is how many tokens of KV the tier holds; ``bandwidth_bytes_per_s`` is
    the sustained bandwidth of the link between this tier and HBM (ignored for HBM itself);
    ``latency_s`` is a fixed setup cost per transfer over that link.
    """

    capacity_tokens: int
    bandwidth_bytes_per_s: float = math.inf
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if self.capacity_tokens < 0:
            raise ValueError(f"capacity_tokens must be >= 0, got {self.capacity_tokens}")
        if not self.bandwidth_bytes_per_s > 0:
            raise ValueError(f"bandwidth must be > 0, got {self.bandwidth_bytes_per_s}")
        if self.latency_s < 0:
            raise ValueError(f"latency_s must be >= 0, got {self.latency_s}")


@dataclass(frozen=True, slots=True)
class TierModel:
    """KV size per token and the spec of each tier. DISK is optional (``None`` = absent).

    Immutable; a cost model builds one and shares it between the prefix index, the tool-wait
    policies and the router.
    """

    kv_bytes_per_token: float
    hbm: TierSpec
    dram: TierSpec
    disk: TierSpec | None = None

    def __post_init__(self) -> None:
        if not self.kv_bytes_per_token > 0:
            raise ValueError(f"kv_bytes_per_token must be > 0, got {self.kv_bytes_per_token}")

    @classmethod
    def build(
        cls,
        *,
        kv_bytes_per_token: float,
        hbm_tokens: int,
        dram_tokens: int = 0,
        dram_bandwidth: float = 25e9,
        disk_tokens: int = 0,
        disk_bandwidth: float = 2e9,
        dram_latency_s: float = 0.0,
        disk_latency_s: float = 0.0,
    ) -> TierModel:
        """A model from plain numbers (bandwidths in bytes/s); DISK exists iff ``disk_tokens``."""
        disk = TierSpec(disk_tokens, disk_bandwidth, disk_latency_s) if disk_tokens > 0 else None
        return cls(
            kv_bytes_per_token=kv_bytes_per_token,
            hbm=TierSpec(hbm_tokens),
            dram=TierSpec(dram_tokens, dram_bandwidth, dram_latency_s),
            disk=disk,
        )

    def has(self, tier: Tier) -> bool:
        """True if ``tier`` exists with a non-zero capacity."""
        spec = self.spec(tier)
        return spec is not None and spec.capacity_tokens > 0

    def spec(self, tier: Tier) -> TierSpec | None:
        """The spec of ``tier``, or ``None`` for an absent DISK."""
        if tier is Tier.HBM:
            return self.hbm
        if tier is Tier.DRAM:
            return self.dram
        return self.disk

    def capacity(self, tier: Tier) -> int:
        """Capacity of ``tier`` in tokens (0 when absent)."""
        spec = self.spec(tier)
        return 0 if spec is None else spec.capacity_tokens

    def next_slower(self, tier: Tier) -> Tier | None:
        """The nearest slower tier that exists, or ``None`` (where evicted KV is demoted)."""
        for slower in ALL_TIERS[tier + 1 :]:
            if self.has(slower):
                return slower
        return None

    def bytes(self, tokens: float) -> float:
        """Bytes of KV for ``tokens`` tokens."""
        return tokens * self.kv_bytes_per_token

    def transfer_seconds(self, tokens: float, src: Tier, dst: Tier) -> float:
        """Seconds to copy ``tokens`` of KV from ``src`` to ``dst`` (0 when they are equal).

        Raises ``ValueError`` if either tier is absent.
        """
        if src == dst or tokens <= 0:
            return 0.0
        a, b = self.spec(src), self.spec(dst)
        if a is None or b is None:
            raise ValueError(f"transfer between {src.name} and {dst.name}: tier absent")
        bandwidth = min(
            math.inf if src is Tier.HBM else a.bandwidth_bytes_per_s,
            math.inf if dst is Tier.HBM else b.bandwidth_bytes_per_s,
        )
        latency = (0.0 if src is Tier.HBM else a.latency_s) + (
            0.0 if dst is Tier.HBM else b.latency_s
        )
        return self.bytes(tokens) / bandwidth + latency
