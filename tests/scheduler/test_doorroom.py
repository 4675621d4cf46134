"""The door's room as pure rules (``scheduler.doorroom``): the shared prefixes' reserve per
tenant and the budget it leaves; the driver applying them is tested in
``test_shared_reserve.py`` and ``test_driver_growth.py``."""

from __future__ import annotations

from agentconsole.scheduler.doorroom import DoorBudget, shared_reserve


def test_the_reserve_counts_each_segment_once_per_tenant_and_at_least_the_largest() -> None:
    platform, repo_a, repo_b = ("p", 2_000), ("a", 5_000), ("b", 5_000)
    prefixes = [
        ("t1", 7_000, (platform, repo_a)),
        ("t1", 7_000, (platform, repo_a)),  # a second program on the same repository
        ("t1", 7_000, (platform, repo_b)),
        ("t2", 2_000, (platform,)),  # another tenant's copy (its keys are salted apart)
        ("t3", 9_000, ()),  # a runtime that names nothing: its largest prefix
        ("t4", 4_000, (("x", 1_000),)),  # learned larger than its probe named
    ]
    assert shared_reserve(prefixes) == 12_000 + 2_000 + 9_000 + 4_000
    assert shared_reserve([]) == 0


def test_the_budget_is_a_share_of_reported_memory_less_the_reserve_or_the_operators() -> None:
    budget = DoorBudget(memory_share=0.5)
    assert (budget.sized, budget.reserves) == (False, True)  # nothing reported yet
    budget.report(100_000, 8)
    assert (budget.sized, budget.batch_slots) == (True, 8)
    assert budget.tokens(10_000) == 40_000
    assert budget.tokens(60_000) == 0  # prefixes fill it: sized, at 0
    operator = DoorBudget(memory_share=0.5, operator_tokens=30_000)
    assert operator.sized
    assert not operator.reserves
    assert operator.tokens(10_000) == 30_000  # taken as given
