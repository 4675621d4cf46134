"""The several-models half of the door's prefix credit (``runtime/prefixcredit.py``): a first
call may run on any of its node's candidate models, so the credit is the least over them of
each model's own credit."""

from __future__ import annotations

from agentconsole.server.runtime.prefixcredit import least_over_models, likely_models

SERVED = {"big": 0, "small": 1, "tiny": 2}
HELD = {"big": 900, "small": 300, "tiny": 0}


def test_the_candidates_served_are_the_likely_models_in_their_order() -> None:
    assert likely_models(("small", "big"), SERVED) == ["small", "big"]
    assert likely_models(("small", "gone"), SERVED) == ["small"]


def test_no_candidate_or_none_served_means_every_served_model() -> None:
    assert likely_models((), SERVED) == ["big", "small", "tiny"]
    assert likely_models(("gone",), SERVED) == ["big", "small", "tiny"]


def test_the_credit_is_the_least_any_likely_model_holds() -> None:
    assert least_over_models(["big", "small"], HELD.__getitem__) == 300
    assert least_over_models(["big"], HELD.__getitem__) == 900
    assert least_over_models(likely_models((), SERVED), HELD.__getitem__) == 0
    assert least_over_models([], HELD.__getitem__) == 0
