"""Cache-aware routing score: which worker should run a call, given its cached prefix and load.

Owns :class:`WorkerState`, :class:`RouteWeights`, :func:`route_cost` and :func:`choose_worker`.
The score follows NVIDIA Dynamo's KV-aware router (lowest wins)::

    credit    = hbm_hits + sum over slower tiers t of max(0, hits_t - load_seconds_t / c)
    prefill   = max(active_prefill + prompt - overlap_weight * credit, 0)
    decode    = active_decode + prompt
    cost      = prefill_load_scale * prefill + decode

where ``load_seconds_t = tiers.transfer_seconds(hits_t, t, HBM)`` and ``c`` is the prefill cost
per token: a hit on DRAM or disk is worth its tokens minus the prefill-equivalent of loading it,
so a slow link makes a lower-tier hit worth less (full credit when no tier model or ``c`` is
given). ``overlap_weight = 0`` is pure load balancing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentconsole.kvtiers.tiers import ALL_TIERS, Tier, TierModel


@dataclass(frozen=True, slots=True)
class WorkerState:
    """One candidate worker: the call's hit tokens there by tier (``Match.tokens_by_tier``)
    and the tokens it is already prefilling and decoding."""

    name: str
    hit_tokens_by_tier: Sequence[int]
    active_prefill_tokens: int = 0
    active_decode_tokens: int = 0


@dataclass(frozen=True, slots=True)
class RouteWeights:
    """Knobs of the score (Dynamo's ``prefill_load_scale`` and KV-overlap score weight)."""

    prefill_load_scale: float = 1.0
    overlap_weight: float = 1.0
    recompute_seconds_per_token: float = 0.0
    tiers: TierModel | None = None


def overlap_credit(hit_tokens_by_tier: Sequence[int], weights: RouteWeights) -> float:
    """Prefill tokens a worker's cached prefix saves, lower tiers discounted by load time."""
    credit = float(hit_tokens_by_tier[Tier.HBM])
    c = weights.recompute_seconds_per_token
    for tier in ALL_TIERS[1:]:
        hits = hit_tokens_by_tier[tier]
        if hits <= 0:
            continue
        if weights.tiers is None or c <= 0:
            credit += hits
        else:
            load = weights.tiers.transfer_seconds(hits, tier, Tier.HBM)
            credit += max(0.0, hits - load / c)
    return credit


def route_cost(prompt_tokens: int, worker: WorkerState, weights: RouteWeights) -> float:
    """Cost of running a ``prompt_tokens`` call on ``worker`` (lower is better)."""
    raw_prefill = worker.active_prefill_tokens + prompt_tokens
    credit = weights.overlap_weight * overlap_credit(worker.hit_tokens_by_tier, weights)
    prefill = max(raw_prefill - credit, 0.0)
    decode = worker.active_decode_tokens + prompt_tokens
    return weights.prefill_load_scale * prefill + decode


def choose_worker(prompt_tokens: int, workers: Sequence[WorkerState], weights: RouteWeights) -> int:
    """Index of the lowest-cost worker (the first on ties); ``ValueError`` if none."""
    if not workers:
        raise ValueError("choose_worker: no workers")
    best, best_cost = 0, route_cost(prompt_tokens, workers[0], weights)
    for i in range(1, len(workers)):
        cost = route_cost(prompt_tokens, workers[i], weights)
        if cost < best_cost:
            best, best_cost = i, cost
    return best
