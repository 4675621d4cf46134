"""A restarted server predicts each tenant's calls' output lengths, per its programs' ``model``
label, as learned before the restart, from the programs' end events (``learned.py``)."""

from __future__ import annotations

import pytest

from agentconsole.scheduler import learned
from agentconsole.scheduler.events import Event, EventKind, Scalar
from agentconsole.scheduler.program import Node, NodeKind
from tests.scheduler.relearn_helpers import events_of, new_driver, run_program

PRIOR = 256.0  # ``OutputLengthEstimator``'s: what a restart that learned nothing predicts

#: (tenant, model label) asked after the restart; "" is a tenant's mean over its calls
ASKED = [
    ("alpha", "small"),
    ("alpha", "large"),
    ("alpha", ""),
    ("bravo", "small"),
    ("bravo", ""),
    ("carol", "small"),
]


def test_a_restarted_driver_predicts_each_tenants_models_output_as_learned_before() -> None:
    """alpha's small and large models, a failed program of the small one last, an unlabelled
    program; bravo labels its programs like alpha's with ten times the output."""
    first = new_driver()
    run_program(first, "s1", "alpha", {"model": "small"}, [40, 60, 50])
    run_program(first, "l1", "alpha", {"model": "large", "workload": "w"}, [2_000, 3_000])
    run_program(first, "u1", "alpha", {}, [500])
    run_program(first, "b1", "bravo", {"model": "small"}, [9_000, 8_000])
    run_program(first, "s2", "alpha", {"model": "small"}, [80], success=False)
    before = first.controller.output_lengths
    expected = [before.predict(tenant, model) for tenant, model in ASKED]
    assert all(e != PRIOR for e in expected[:-1])  # learned, and carol never ran
    assert expected[-1] == PRIOR

    second = new_driver()
    assert second.relearn(events_of(first).events) == 5
    after = second.controller.output_lengths
    assert [after.predict(tenant, model) for tenant, model in ASKED] == expected
    # what a new program's call is sized by, before any of the new process's calls ended
    second.controller.open_program("next", "alpha", 4.0, labels={"model": "large"})
    node = second.controller.add_node("next", Node("n0", "next", NodeKind.LLM), 4.0)
    assert node.expected_output_tokens == before.predict("alpha", "large")
    assert "output_tokens" not in second.controller.prediction_log.summary()  # nothing logged


def _finished(data: dict[str, Scalar]) -> Event:
    return Event(1.0, EventKind.PROGRAM_FINISHED, "p", tenant="alpha", data=data)


@pytest.mark.parametrize(
    "data",
    [
        {learned.LABEL: "", learned.CALLS: 2},  # stored before output lengths were recorded
        {learned.MODEL: "small", learned.MODEL_OUTPUT_TOKENS: True},
        {learned.MODEL: "small", learned.MODEL_OUTPUT_TOKENS: "40"},
        {learned.MODEL: "small", learned.MODEL_OUTPUT_TOKENS: float("nan")},
        {learned.MODEL: "small", learned.MODEL_OUTPUT_TOKENS: float("inf")},
        {learned.MODEL: "small", learned.MODEL_OUTPUT_TOKENS: -1.0},
        {learned.MODEL: 3, learned.MODEL_OUTPUT_TOKENS: 40.0},
    ],
)
def test_an_end_with_no_output_length_recorded_teaches_none(data: dict[str, Scalar]) -> None:
    driver = new_driver()
    driver.relearn([_finished(data)])
    lengths = driver.controller.output_lengths
    assert (lengths.predict("alpha", "small"), lengths.predict("alpha")) == (PRIOR, PRIOR)
