"""What several model engines show the server as one: memory summed, snapshots merged.

A program's KV on one model is no use to another (different weights), so the fleet's memory is
the sum of its engines' and each engine's device tier is also shown on its own
(``hbm.<model>``), the way data-parallel ranks show ``hbm.rank<r>``.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentconsole.scheduler.runtime import (
    MemoryView,
    QueuedCall,
    RunningCall,
    RuntimeSnapshot,
    TierUsage,
)


def merged_memory(views: Mapping[str, MemoryView]) -> MemoryView:
    """The engines' memory and queues summed (bytes per token: the largest, host link: the
    slowest, so a restore is never predicted cheaper than on any engine)."""
    items = list(views.values())
    if len(items) == 1:
        return items[0]
    return MemoryView(
        hbm_capacity_tokens=sum(v.hbm_capacity_tokens for v in items),
        free_tokens=sum(v.free_tokens for v in items),
        evictable_tokens=sum(v.evictable_tokens for v in items),
        protected_tokens=sum(v.protected_tokens for v in items),
        queued_tokens=sum(v.queued_tokens for v in items),
        queued_calls=sum(v.queued_calls for v in items),
        running_calls=sum(v.running_calls for v in items),
        batch_slots=sum(v.batch_slots for v in items),
        dram_capacity_tokens=sum(v.dram_capacity_tokens for v in items),
        kv_bytes_per_token=max(v.kv_bytes_per_token for v in items),
        host_link_bytes_per_s=min(v.host_link_bytes_per_s for v in items),
        engines=sum(v.engines for v in items),
    )


def merged_snapshot(name: str, snapshots: Mapping[str, RuntimeSnapshot]) -> RuntimeSnapshot:
    """One snapshot of every engine: queues and batches together, each tier summed and each
    engine's tiers also under ``<tier>.<model>``, placement summed per program and tier."""
    tiers: dict[str, TierUsage] = {}
    placement: dict[str, dict[str, int]] = {}
    queued: list[QueuedCall] = []
    running: list[RunningCall] = []
    policy = ""
    for model, snap in snapshots.items():
        policy = policy or snap.policy
        queued.extend(snap.queued)
        running.extend(snap.running)
        for tier, usage in snap.tiers.items():
            tiers[f"{tier}.{model}"] = usage
            if "." in tier:  # a data-parallel rank's share, already in its engine's sum
                continue
            was = tiers.get(tier, TierUsage(0, 0, 0))
            tiers[tier] = TierUsage(
                was.used_tokens + usage.used_tokens,
                was.capacity_tokens + usage.capacity_tokens,
                was.used_bytes + usage.used_bytes,
            )
        for program, by_tier in snap.placement.items():
            mine = placement.setdefault(program, {})
            for tier, tokens in by_tier.items():
                mine[tier] = mine.get(tier, 0) + tokens
    return RuntimeSnapshot(
        runtime=name,
        policy=policy,
        queued=tuple(sorted(queued, key=lambda q: q.key)),
        running=tuple(running),
        tiers=tiers,
        placement=placement,
        prefix_hit_tokens=sum(s.prefix_hit_tokens for s in snapshots.values()),
        paused=all(s.paused for s in snapshots.values()),
    )
