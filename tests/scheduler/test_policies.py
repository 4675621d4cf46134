"""Policies order as documented; the registry has every policy of the design."""

from __future__ import annotations

import pytest

from agentconsole.scheduler.policies import available, get_policy
from agentconsole.scheduler.ticket import CallTicket


def _t(**kw: float) -> CallTicket:
    base = CallTicket(call_id="c", program_id="p", node_id="n", tenant="t", arrival=0.0)
    for k, v in kw.items():
        setattr(base, k, v)
    return base


def test_registry_has_all_policies() -> None:
    assert set(available()) >= {
        "fcfs",
        "sjf",
        "plas",
        "atlas",
        "progress",
        "critical-path",
        "cp-cache",
    }
    with pytest.raises(KeyError, match="choose from"):
        get_policy("nope")


def test_fcfs_orders_by_arrival() -> None:
    p = get_policy("fcfs")
    assert p.key(_t(arrival=1.0), 5.0) < p.key(_t(arrival=2.0), 5.0)
    assert not p.preemptive


def test_sjf_orders_by_service_estimate() -> None:
    p = get_policy("sjf")
    assert p.key(_t(service_estimate_s=0.1), 0) < p.key(_t(service_estimate_s=2.0), 0)


def test_plas_prefers_least_attained_service_in_discrete_queues() -> None:
    p = get_policy("plas", first_quantum_s=0.1, ratio=2.0, queues=5)
    assert p.key(_t(program_service_s=0.0), 0) < p.key(_t(program_service_s=0.5), 0)
    # same queue: equal keys, FIFO by the mechanism's tie-break
    assert p.key(_t(program_service_s=0.21), 0) == p.key(_t(program_service_s=0.39), 0)
    # the last queue absorbs everything above
    assert p.key(_t(program_service_s=1e6), 0) == 4.0


def test_atlas_uses_critical_path_service() -> None:
    p = get_policy("atlas")
    wide = _t(program_service_s=100.0, cp_service_s=0.0)
    long = _t(program_service_s=1.0, cp_service_s=1.0)
    assert p.key(wide, 0) < p.key(long, 0)


def test_progress_prefers_more_completed_calls() -> None:
    p = get_policy("progress")
    assert p.key(_t(completed_calls=9), 0) < p.key(_t(completed_calls=1), 0)


def test_critical_path_prefers_less_remaining_and_urgent_deadlines() -> None:
    p = get_policy("critical-path")
    assert p.key(_t(remaining_cp_s=1.0), 0) < p.key(_t(remaining_cp_s=10.0), 0)
    assert p.key(_t(remaining_cp_s=1.0, unlock_value=4), 0) < p.key(_t(remaining_cp_s=1.0), 0)
    urgent = _t(remaining_cp_s=50.0, deadline=52.0)
    assert p.key(urgent, 0) < p.key(_t(remaining_cp_s=1.0), 0)


def test_a_path_that_outruns_the_drain_goes_first() -> None:
    """A program whose remaining path is longer than the engines' drain sets the end of the
    burst: it goes before shorter paths (SRPT among the rest), the one that outruns the drain
    most first; a drain not known (0) changes nothing."""
    p = get_policy("cp-cache")
    short, long_ = _t(remaining_cp_s=1.0, drain_s=8.0), _t(remaining_cp_s=9.0, drain_s=8.0)
    longest = _t(remaining_cp_s=12.0, drain_s=8.0)
    assert p.key(longest, 0) < p.key(long_, 0) < p.key(short, 0)
    assert p.key(_t(remaining_cp_s=1.0), 0) < p.key(_t(remaining_cp_s=9.0), 0)
    # the drain was told when the call was queued: time spent waiting since counts against it
    waited = _t(remaining_cp_s=5.0, drain_s=8.0, arrival=0.0)
    assert p.key(waited, 4.0) < p.key(short, 4.0)
    assert p.key(waited, 2.0) > p.key(short, 2.0)
    # a deadline and the drain: the least slack of the two decides
    due = _t(remaining_cp_s=9.0, drain_s=8.0, deadline=3.0)
    assert p.key(due, 0) < p.key(longest, 0)


def test_cp_cache_charges_restore_cost() -> None:
    p = get_policy("cp-cache")
    assert p.key(_t(remaining_cp_s=2.0), 0) < p.key(_t(remaining_cp_s=2.0, restore_cost_s=3), 0)


@pytest.mark.parametrize(
    "name", ["fcfs", "sjf", "plas", "atlas", "progress", "critical-path", "cp-cache"]
)
def test_boost_always_moves_a_call_ahead(name: str) -> None:
    p = get_policy(name)
    plain = _t(arrival=1.0, remaining_cp_s=3.0, completed_calls=2, program_service_s=1.0)
    boosted = _t(
        arrival=1.0, remaining_cp_s=3.0, completed_calls=2, program_service_s=1.0, boost=1e6
    )
    assert p.key(boosted, 0) < p.key(plain, 0)


def test_a_ticket_copy_with_changes_leaves_the_original() -> None:
    t = _t(remaining_cp_s=3.5, deadline=9.0, completed_calls=3)
    twin = t.but(seq=7, cached_tokens=40)
    assert (twin.seq, twin.cached_tokens, twin.deadline, twin.remaining_cp_s) == (7, 40, 9.0, 3.5)
    assert (t.seq, t.cached_tokens) == (0, 0)
    assert t.but() == t
    assert t.but() is not t
    with pytest.raises(AttributeError):
        t.but(no_such_field=1)


def test_ticket_params_round_trip() -> None:
    t = _t(remaining_cp_s=3.5, deadline=9.0, completed_calls=3)
    back = CallTicket.from_params({**t.to_params(), "unknown_future_field": 1})
    assert back == t
