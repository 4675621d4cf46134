"""What one tenant can make the scheduler's learners hold is bounded: a tenant that sends a new
label with every program evicts its own least recently used keys, never another tenant's, and
an evicted key is predicted as a key never seen."""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable

import pytest

from agentconsole.scheduler.bounded import KEYS_PER_TENANT, TenantLru
from agentconsole.scheduler.estimators import (
    OutputLengthEstimator,
    RemainingWorkEstimator,
    ToolLatencyEstimator,
)
from agentconsole.scheduler.growth import PeakEstimator, RunTimes

#: more labels than a tenant's learner holds
FLOOD = KEYS_PER_TENANT + 44


def _allocated_by(work: Callable[[], None]) -> int:
    """Bytes ``work`` left allocated."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


# -- the mapping ---------------------------------------------------------------------------------
def test_a_tenant_past_its_cap_forgets_its_own_least_recently_used_key() -> None:
    held: TenantLru[int] = TenantLru(3)
    for k, key in enumerate(("a", "b", "c")):
        held.put("t", key, k)
    held.put("other", "a", 9)
    assert held.get("t", "a") == 0  # read: now its most recently used
    held.put("t", "d", 3)
    assert held.keys_of("t") == ["c", "a", "d"]  # b, the least recently used, went
    assert held.get("t", "b") is None
    assert held.get("other", "a") == 9  # another tenant's keys are its own
    assert held.get("t", "never") is None
    assert held.get("nobody", "a") is None
    assert held.keys_of("t") == ["c", "a", "d"]  # misses store nothing
    assert held.keys_of("nobody") == []


def test_setdefault_stores_once_and_a_copy_is_independent() -> None:
    held: TenantLru[list[int]] = TenantLru(2)
    first = held.setdefault("t", "a", list)
    first.append(1)
    assert held.setdefault("t", "a", list) == [1]  # not made again
    copied = held.copy()
    held.put("t", "b", [2])
    held.put("t", "c", [3])
    assert copied.keys_of("t") == ["a"]
    assert held.keys_of("t") == ["b", "c"]
    assert sorted(held.items()) == [("t", "b", [2]), ("t", "c", [3])]
    with pytest.raises(ValueError, match="must be able to hold a key"):
        TenantLru(0)


# -- remaining work ------------------------------------------------------------------------------
def _finish_five(work: RemainingWorkEstimator, tenant: str, label: str, calls: int) -> None:
    """Enough of ``tenant``'s programs of ``label`` for its own histogram to predict."""
    for _ in range(5):
        work.observe_finished(tenant, label, calls, [])


def test_asking_about_labels_never_finished_holds_nothing() -> None:
    work = RemainingWorkEstimator()
    _finish_five(work, "t", "known", 3)

    def ask() -> None:
        for k in range(5_000):
            assert work.remaining_calls("t", f"never-{k}", 0) == 8.0  # the prior

    assert _allocated_by(ask) < 16_000  # it cached ~5,000 empty tables (~700 KB)
    assert work.remaining_calls("t", "known", 0) == 3.0


def test_a_tenant_flooding_workload_labels_holds_a_bounded_histogram_set() -> None:
    work = RemainingWorkEstimator()

    def flood() -> None:
        for k in range(2_000):
            work.observe_finished("t", f"label-{k}", 3, [])

    # one histogram of 513 counts per label held: 2,000 of them held ~9 MB
    assert _allocated_by(flood) < (KEYS_PER_TENANT + 8) * 513 * 8 + 200_000


def test_a_forgotten_label_is_predicted_by_the_prior_and_others_keep_theirs() -> None:
    work = RemainingWorkEstimator()
    for tenant in ("t", "other"):
        _finish_five(work, tenant, "old", 3)
        _finish_five(work, tenant, "used", 2)
    for k in range(FLOOD):
        work.observe_finished("t", f"new-{k}", 3, [])
        assert work.remaining_calls("t", "used", 0) == 2.0  # in use: never the one forgotten
    assert work.remaining_calls("t", "old", 0) == 8.0  # as a label never seen
    assert work.remaining_calls("other", "old", 0) == 3.0  # another tenant's, as it was
    _finish_five(work, "t", "old", 3)  # learned again from its next ends
    assert work.remaining_calls("t", "old", 0) == 3.0


# -- output lengths ------------------------------------------------------------------------------
def test_a_forgotten_model_is_predicted_by_its_tenants_mean() -> None:
    lengths = OutputLengthEstimator()
    lengths.observe("t", "old", 1_000)
    lengths.observe("other", "old", 1_000)
    for k in range(FLOOD):
        lengths.observe("t", f"model-{k}", 10)
    tenant_mean = lengths.learned("t")
    assert tenant_mean is not None  # the tenant's mean is never the one forgotten
    assert lengths.learned("t", "old") is None
    assert lengths.predict("t", "old") == tenant_mean
    assert lengths.predict("other", "old") == 1_000
    assert lengths.predict("t", f"model-{FLOOD - 1}") == 10


def test_a_tenant_flooding_model_labels_holds_a_bounded_set_of_means() -> None:
    lengths = OutputLengthEstimator()
    lengths.observe("t", "warm", 10)  # the tenant's own map exists before counting

    def flood() -> None:
        for k in range(20_000):
            lengths.observe("t", f"model-{k}", 10)

    assert _allocated_by(flood) < 200_000  # 20,000 means held ~2.5 MB


# -- tool latencies ------------------------------------------------------------------------------
def test_a_forgotten_tool_is_predicted_by_its_kinds_fit() -> None:
    latency = ToolLatencyEstimator(min_samples=1)
    latency.learn("t", "old", "test_run", 100.0)
    latency.learn("other", "old", "test_run", 100.0)
    for k in range(FLOOD):
        latency.learn("t", f"tool-{k}", "test_run", 1.0)
    kind_fit = latency.distribution("t", "never-seen", "test_run")
    assert kind_fit != latency.distribution("t", "never-seen", "no-kind")  # learned, no prior
    assert latency.distribution("t", "old", "test_run") == kind_fit
    assert latency.distribution("other", "old", "test_run").mu == pytest.approx(math.log(100.0))


def test_a_tool_named_like_a_kind_learns_apart_from_that_kind() -> None:
    """A tool's name is the client's: one named ``kind:test_run`` is a tool like any other
    (before, it shared the fit of every test run of its tenant)."""
    latency = ToolLatencyEstimator(min_samples=1)
    for _ in range(3):
        latency.learn("t", "kind:test_run", "search", 0.01)
        latency.learn("t", "pytest", "test_run", 100.0)
    assert latency.distribution("t", "never-seen", "test_run").mu == pytest.approx(math.log(100))
    assert latency.distribution("t", "kind:test_run", "x").mu == pytest.approx(math.log(0.01))


# -- growth and runs -----------------------------------------------------------------------------
def test_a_forgotten_kind_is_taken_for_an_average_one_of_its_tenants() -> None:
    peaks, runs = PeakEstimator(), RunTimes()
    for tenant in ("t", "other"):
        peaks.observe((tenant, "old"), 50_000)
        runs.observe((tenant, "old"), 900.0)
    for k in range(FLOOD):
        peaks.observe(("t", f"kind-{k}"), 100)
        runs.observe(("t", f"kind-{k}"), 2.0)
    assert peaks.known(("t", "old")) is None
    assert peaks.predict(("t", "old"), 300) == 300  # what it holds, as a kind never seen
    assert len([key for key, _ in peaks.items() if key[0] == "t"]) == KEYS_PER_TENANT
    assert runs.expected(("t", "old")) == pytest.approx(2.0)  # its tenant's average kind
    assert peaks.known(("other", "old")) == 50_000
    assert runs.expected(("other", "old")) == 900.0


def test_a_tenants_average_kind_does_not_depend_on_which_kinds_were_read_last() -> None:
    """Reading a kind makes it the most recently used: the average over the tenant's kinds
    is the same whatever order they are held in (a sum in their order was not: 1e16 + 1 + 1
    rounds to 1e16, 1 + 1 + 1e16 does not)."""
    runs = RunTimes()
    for kind, seconds in (("huge", 1e16), ("one", 1.0), ("another", 1.0)):
        runs.observe(("t", kind), seconds)
    before = runs.expected(("t", "unseen"))
    assert runs.expected(("t", "huge")) == 1e16  # now the most recently used
    assert runs.expected(("t", "unseen")) == before == (1e16 + 2.0) / 3
