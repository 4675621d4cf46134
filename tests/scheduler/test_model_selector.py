"""The model selector: pins, tier exclusions and the three registered rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentconsole.scheduler.models import (
    ModelOption,
    ModelRequest,
    ModelSelector,
    Pins,
    available_rules,
    get_rule,
)

LARGE = ModelOption("large", tier=2, price_per_mtok=0.9, queue_s=4.0, service_s=3.0, tokens=10**6)
SMALL = ModelOption("small", tier=1, price_per_mtok=0.2, queue_s=0.5, service_s=1.0, tokens=10**6)


def test_rules_registered_by_name() -> None:
    assert available_rules() == ["all-large", "fixed-roles", "finish-time"]
    with pytest.raises(KeyError, match="choose from"):
        get_rule("cheapest")


def test_all_large_takes_the_top_tier_even_when_slower() -> None:
    choice = ModelSelector(get_rule("all-large")).select([SMALL, LARGE], ModelRequest("p"))
    assert choice.chosen == "large"
    assert choice.finish_s == {"small": 1.5, "large": 7.0}
    assert choice.price == {"small": pytest.approx(0.2), "large": pytest.approx(0.9)}


def test_finish_time_takes_the_earliest_finish_meeting_the_tier() -> None:
    selector = ModelSelector(get_rule("finish-time"))
    assert selector.select([LARGE, SMALL], ModelRequest("p")).chosen == "small"
    strict = selector.select([LARGE, SMALL], ModelRequest("p", role="planner", min_tier=2))
    assert strict.chosen == "large"
    assert strict.excluded == {"small": "tier 1 < required 2"}


def test_cold_start_and_cache_reuse_move_the_finish_time() -> None:
    cold = ModelOption("small", 1, loaded=False, load_s=30.0, queue_s=0.5, service_s=1.0)
    warm_large = ModelOption("large", 2, queue_s=0.0, service_s=2.0, cached_tokens=80_000)
    choice = ModelSelector(get_rule("finish-time")).select([cold, warm_large], ModelRequest("p"))
    assert choice.chosen == "large"
    assert choice.cached_tokens == {"small": 0, "large": 80_000}
    assert choice.finish_s["small"] == pytest.approx(31.5)


def test_price_breaks_ties_and_weighs_when_asked() -> None:
    a = ModelOption("a", 1, price_per_mtok=1.0, service_s=2.0, tokens=10**6)
    b = ModelOption("b", 1, price_per_mtok=0.5, service_s=2.0, tokens=10**6)
    assert ModelSelector(get_rule("finish-time")).select([a, b], ModelRequest("p")).chosen == "b"
    fast_dear = ModelOption("fast", 1, price_per_mtok=10.0, service_s=1.0, tokens=10**6)
    slow_cheap = ModelOption("slow", 1, price_per_mtok=0.0, service_s=3.0, tokens=10**6)
    weighted = ModelSelector(get_rule("finish-time", seconds_per_price=1.0))
    assert weighted.select([fast_dear, slow_cheap], ModelRequest("p")).chosen == "slow"


def test_fixed_roles_maps_roles_and_falls_back_to_the_top_tier() -> None:
    selector = ModelSelector(get_rule("fixed-roles", roles={"verify": "small", "plan": "tiny"}))
    assert selector.select([LARGE, SMALL], ModelRequest("p", role="verify")).chosen == "small"
    unmapped = selector.select([LARGE, SMALL], ModelRequest("p", role="writer"))
    assert unmapped.chosen == "large"
    assert "unmapped" in unmapped.reason
    missing = selector.select([LARGE, SMALL], ModelRequest("p", role="plan"))
    assert missing.chosen == "large"
    assert "tiny not eligible" in missing.reason
    # a mapped model below the node's tier is excluded, so the map cannot lower quality
    below = selector.select([LARGE, SMALL], ModelRequest("p", role="verify", min_tier=2))
    assert below.chosen == "large"


def test_pins_override_rule_and_tier_program_first() -> None:
    pins = Pins(programs={"p1": "small"}, roles={"planner": "large"})
    selector = ModelSelector(get_rule("finish-time"), pins)
    by_program = selector.select([LARGE, SMALL], ModelRequest("p1", "planner", min_tier=2))
    assert by_program.chosen == "small"
    assert by_program.reason == "pinned by program p1"
    by_role = selector.select([LARGE, SMALL], ModelRequest("p2", "planner"))
    assert by_role.chosen == "large"
    assert by_role.reason == "pinned by role planner"
    # a pin to a model the node cannot run on is reported and the rule decides
    only_small = selector.select([SMALL], ModelRequest("p2", "planner"))
    assert only_small.chosen == "small"
    assert only_small.reason.startswith("pin large")


def test_no_candidate_meeting_the_tier_gets_the_best_quality() -> None:
    choice = ModelSelector(get_rule("finish-time")).select([SMALL], ModelRequest("p", min_tier=3))
    assert choice.chosen == "small"
    assert "no candidate meets tier 3" in choice.reason


def test_bad_inputs_are_refused() -> None:
    selector = ModelSelector(get_rule("all-large"))
    with pytest.raises(ValueError, match="at least one"):
        selector.select([], ModelRequest("p"))
    with pytest.raises(ValueError, match="repeat"):
        selector.select([SMALL, SMALL], ModelRequest("p"))
    with pytest.raises(ValueError, match="non-negative"):
        ModelOption("x", 1, queue_s=-1.0)


options = st.lists(
    st.builds(
        ModelOption,
        name=st.sampled_from(["a", "b", "c", "d", "e"]),
        tier=st.integers(0, 3),
        price_per_mtok=st.floats(0, 10),
        loaded=st.booleans(),
        load_s=st.floats(0, 100),
        queue_s=st.floats(0, 100),
        service_s=st.floats(0, 100),
        cached_tokens=st.integers(0, 10**6),
        tokens=st.integers(0, 10**6),
    ),
    min_size=1,
    max_size=5,
    unique_by=lambda o: o.name,
)


@given(options, st.integers(0, 3), st.sampled_from(["all-large", "fixed-roles", "finish-time"]))
def test_every_rule_chooses_a_candidate_meeting_the_tier_when_one_does(
    opts: list[ModelOption], min_tier: int, rule: str
) -> None:
    params = {"roles": {"r": "a"}} if rule == "fixed-roles" else {}
    choice = ModelSelector(get_rule(rule, **params)).select(opts, ModelRequest("p", "r", min_tier))
    names = {o.name for o in opts}
    assert choice.chosen in names
    assert set(choice.finish_s) == names == set(choice.price) == set(choice.cached_tokens)
    eligible = [o for o in opts if o.tier >= min_tier]
    assert set(choice.excluded) == names - {o.name for o in eligible}
    if eligible:
        assert choice.chosen in {o.name for o in eligible}


@given(options, st.integers(0, 3))
def test_finish_time_is_never_beaten_among_eligible(opts: list[ModelOption], tier: int) -> None:
    choice = ModelSelector(get_rule("finish-time")).select(opts, ModelRequest("p", None, tier))
    eligible = [o.finish_s for o in opts if o.tier >= tier]
    if eligible:
        assert choice.finish_s[choice.chosen] == min(eligible)


@given(options)
def test_all_large_is_always_top_tier(opts: list[ModelOption]) -> None:
    choice = ModelSelector(get_rule("all-large")).select(opts, ModelRequest("p"))
    assert next(o.tier for o in opts if o.name == choice.chosen) == max(o.tier for o in opts)


def test_a_rule_is_set_up_from_one_setup_whatever_its_name() -> None:
    from agentconsole.scheduler.models import RuleSetup, available_rules, make_rule
    from agentconsole.scheduler.models.rules import FinishTime, FixedRoles

    setup = RuleSetup(roles={"verify": "small"}, seconds_per_price=2.0)
    rules = {name: make_rule(name, setup) for name in available_rules()}
    assert set(rules) >= {"all-large", "fixed-roles", "finish-time"}
    fixed, finish = rules["fixed-roles"], rules["finish-time"]
    assert isinstance(fixed, FixedRoles)
    assert fixed.roles == {"verify": "small"}
    assert isinstance(finish, FinishTime)
    assert finish.seconds_per_price == 2.0
    with pytest.raises(KeyError, match="choose from"):
        make_rule("cheapest", setup)
