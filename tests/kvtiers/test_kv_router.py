"""Cache-aware routing score (Dynamo-style): hits, load and lower-tier transfer cost."""

from __future__ import annotations

import pytest

from agentconsole.kvtiers import RouteWeights, TierModel, WorkerState, choose_worker, route_cost
from agentconsole.kvtiers.router import overlap_credit

W = RouteWeights()


def test_cached_prefix_wins_when_loads_are_equal() -> None:
    workers = [WorkerState("cold", [0, 0, 0]), WorkerState("warm", [8000, 0, 0])]
    assert choose_worker(10_000, workers, W) == 1
    assert route_cost(10_000, workers[1], W) == 2000 + 10_000


def test_load_outweighs_a_small_hit() -> None:
    workers = [
        WorkerState("busy-warm", [2000, 0, 0], active_prefill_tokens=50_000),
        WorkerState("idle-cold", [0, 0, 0]),
    ]
    assert choose_worker(10_000, workers, W) == 1


def test_a_hit_under_the_minimum_share_of_the_prompt_counts_nothing() -> None:
    """A chat template's head shared by every prompt (SGLang's router: ``--cache-threshold``)."""
    head = WorkerState("template", [2999, 0, 0])
    assert route_cost(10_000, head, W) == route_cost(10_000, WorkerState("cold", [0, 0, 0]), W)
    assert route_cost(10_000, WorkerState("warm", [2000, 1000, 0]), W) == 7000 + 10_000
    assert route_cost(10_000, head, RouteWeights(min_hit_share=0.0)) == 7001 + 10_000


def test_pure_load_balancing_ignores_hits() -> None:
    workers = [
        WorkerState("warm", [9000, 0, 0], active_decode_tokens=100),
        WorkerState("cold", [0, 0, 0]),
    ]
    assert choose_worker(10_000, workers, RouteWeights(overlap_weight=0.0)) == 1
    assert choose_worker(10_000, workers, W) == 0


def test_lower_tier_hits_are_discounted_by_their_load_time() -> None:
    slow = TierModel.build(
        kv_bytes_per_token=131072.0, hbm_tokens=10**6, dram_tokens=10**7, dram_bandwidth=1e9
    )
    weights = RouteWeights(recompute_seconds_per_token=1e-4, tiers=slow)
    # loading 8000 tokens takes 1.05 s = 10486 tokens of prefill: worth nothing
    assert overlap_credit([0, 8000, 0], weights) == 0.0
    assert overlap_credit([0, 8000, 0], RouteWeights()) == 8000.0  # no model: full credit
    workers = [WorkerState("dram-hit", [0, 8000, 0]), WorkerState("hbm-hit", [4000, 0, 0])]
    assert choose_worker(10_000, workers, weights) == 1
    fast = TierModel.build(kv_bytes_per_token=131072.0, hbm_tokens=10**6, dram_tokens=10**7)
    assert choose_worker(10_000, workers, RouteWeights(1.0, 1.0, 1e-4, fast)) == 0


def test_no_workers_is_an_error() -> None:
    with pytest.raises(ValueError, match="no workers"):
        choose_worker(1, [], W)
